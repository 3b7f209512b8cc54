#!/usr/bin/env python3
"""Checks that every repository path the docs and the code's comments name exists.

  check_doc_paths.py [--root DIR]   prints path:line: 'name': why, for each name that leads
                                    nowhere; exit 1 if any

Where it looks: docs/*.md and README.md (text, code blocks and link targets), and the comments
of src/, include/, tools/, tests/, bench/ and examples/ (// and /* */ in C++ and .proto, # in
shell, Python, CMake and the tests' .txt lists).

What it takes for a path: a word with a slash that starts with a top folder of the repository
(src/, include/, tools/, tests/, bench/, examples/, docs/, scripts/, cmake/), or a word with a
slash that ends in a source or doc suffix (.h .cc .md .sh .py .proto .cmake .in .txt); in
Markdown also the target of a relative link. Such a name is found if it exists from the
repository's root, from the naming file's folder, or from include/, src/, tests/ or tools/ (the
folders the code's own includes start from: dist/core/error.h, collective/store/store_host.h);
a name with * must match a file (glob). A name with braces stands for each of its expansions,
as in the shell: src/data/image_{png,jpeg}.cc is src/data/image_png.cc and src/data/image_jpeg.cc,
a/b.{h,cc} is a/b.h and a/b.cc, and every one must exist. Left alone: URLs, absolute paths, names
with a placeholder (<name>, {name} without a comma, X, an upper-case first folder: OUT_DIR/x.cc),
names under build/, and the names of tests/docs/doc_paths_allow.txt (other projects' files: each
line says why).

  check_doc_paths.py --self-test   checks the reading of each form on planted lines
"""
import argparse
import fnmatch
import glob
import os
import re
import sys

ALLOW = "tests/docs/doc_paths_allow.txt"
TOP = ("src", "include", "tools", "tests", "bench", "examples", "docs", "scripts", "cmake")
SUFFIX = re.compile(r"\.(h|hpp|cc|cpp|md|sh|py|proto|cmake|in|txt)$")
BASES = ("", "include", "src", "tests", "tools")
COMMENTED = ("src", "include", "tools", "tests", "bench", "examples")
C_LIKE = (".h", ".hpp", ".cc", ".cpp", ".proto", ".in")
HASH_LIKE = (".sh", ".py", ".cmake", ".txt")
# A word: letters, digits and the characters of paths, globs and placeholders.
WORD = re.compile(r"[A-Za-z0-9_.*/<>{}\[\]+,~$@:%=-]+")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
LINK = re.compile(r"\]\(([^)\s]+)\)")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def expand(word):
    """The shell's brace expansion, innermost first: a/{b,c}.{h,cc} is four names."""
    match = BRACES.search(word)
    if not match:
        return [word]
    names = []
    for part in match.group(1).split(","):
        names.extend(expand(word[:match.start()] + part + word[match.end():]))
    return names


def read_allow(root):
    allowed = []
    with open(os.path.join(root, ALLOW), encoding="utf-8") as allow:
        for line in allow:
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.append(line.split()[0])
    return allowed


def comments_c(text):
    """Yields (line number, comment text) of // and /* */ comments, outside strings."""
    number, i, n = 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            number += 1
        elif c in "\"'":
            if c == '"' and text.startswith('R"', i - 1):  # raw string: R"delim( ... )delim"
                close = ")" + text[i + 1:text.find("(", i)] + '"'
                end = text.find(close, i)
                end = n if end < 0 else end + len(close)
                number += text.count("\n", i, end)
                i = end
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            yield number, text[i + 2:end]
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i)
            end = n if end < 0 else end
            for k, line in enumerate(text[i + 2:end].split("\n")):
                yield number + k, line
            number += text.count("\n", i, end)
            i = end + 2
            continue
        i += 1


def comments_hash(text):
    for number, line in enumerate(text.split("\n"), 1):
        match = re.search(r"(?:^|\s)#(?![!{])", line)
        if match and not (number == 1 and line.startswith("#!")):
            yield number, line[match.end():]


def lines_of(path, text):
    if path.endswith(".md"):
        return enumerate(text.split("\n"), 1)
    if path.endswith(C_LIKE):
        return comments_c(text)
    if path.endswith(HASH_LIKE) or os.path.basename(path) == "CMakeLists.txt":
        return comments_hash(text)
    return []


def candidates(line):
    """The path-like names of a line of text, as (name, is a link target)."""
    for link in LINK.findall(line):
        if not URL.match(link) and not link.startswith(("#", "mailto:")):
            yield link.split("#", 1)[0], True
    line = URL.sub(" ", line)
    for match in WORD.finditer(line):
        word = match.group(0)
        start = match.start()
        word = word.rstrip(".,:;)]'`\"")
        word = word.lstrip("([`'\"")
        if word.startswith(("/", "~", "$", "./..")):
            continue
        after_slash = start > 0 and line[start - 1] in "/\\$"
        for name in expand(word):
            if "/" not in name:
                if SUFFIX.search(name) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", name):
                    yield name, False  # a bare file name: found anywhere in the repository
            elif not after_slash and path_like(name):
                yield name[2:] if name.startswith("./") else name, False


def path_like(word):
    """Whether a word with a slash (braces expanded) names a file of the repository."""
    if re.search(r"[<>{}\[\]$@%=~,]|\bX\b|\.\.\.", word) or ":" in word:
        return False
    if word.startswith("./"):
        word = word[2:]
    first = word.split("/", 1)[0]
    if first.isupper():
        return False  # a variable: OUT_DIR/doc_blocks.cc
    return first in TOP or bool(SUFFIX.search(word))


def found(root, folder, name, known):
    """Whether a name leads to a file or folder (see the top of this file); `known` holds the
    base names of every file of the repository and the generated headers' names."""
    if "/" not in name or name in known:
        return name in known
    for base in (folder,) + BASES:
        candidate = os.path.normpath(os.path.join(root, base, name))
        if "*" in name:
            # CMake's GLOB_RECURSE: src/*.cc is every .cc below src/.
            head, tail = os.path.split(candidate)
            if glob.glob(candidate) or glob.glob(os.path.join(head, "**", tail), recursive=True):
                return True
        elif any(os.path.exists(candidate + end) for end in ("", ".cc", ".h")):
            return True  # a program is named by its source: bench/ps_bench is bench/ps_bench.cc
    return False


def known_names(root):
    names = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "build"]
        names.update(files)
    with open(os.path.join(root, "docs/layers.txt"), encoding="utf-8") as table:
        for line in table:
            if line.startswith("generated:"):
                names.update(line.split("#", 1)[0].split()[1:])
    return names


def files(root):
    yield "README.md"
    for name in sorted(os.listdir(os.path.join(root, "docs"))):
        if name.endswith(".md"):
            yield "docs/" + name
    for top in COMMENTED:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(names):
                yield os.path.relpath(os.path.join(folder, name), root)


# Planted lines and the names the checker must take from each, one per form the docs use.
FORMS = (
    ("see src/data/row_share.h.", ["src/data/row_share.h"]),
    ("`src/distribute/step/sharded_step.{h,cc}`",
     ["src/distribute/step/sharded_step.h", "src/distribute/step/sharded_step.cc"]),
    ("src/data/image_{png,jpeg}.cc", ["src/data/image_png.cc", "src/data/image_jpeg.cc"]),
    ("a/{b,c}.{h,cc}", ["a/b.h", "a/b.cc", "a/c.h", "a/c.cc"]),
    ("row_share.{h,cc}", ["row_share.h", "row_share.cc"]),
    ("`src/train/elastic_*.cc`", ["src/train/elastic_*.cc"]),
    ("[the guide](guide.md#data) and [x](https://example.org/a.md)", ["guide.md", "guide.md"]),
    ("src/collective/<name>/<name>_transport.{h,cc}, OUT_DIR/doc_blocks.cc, DIR/{a,b}/", []),
)


def self_test():
    """Fails if a form of FORMS is read otherwise than it says."""
    failed = 0
    for line, expected in FORMS:
        names = [name for name, _ in candidates(line)]
        if names != expected:
            print(f"check_doc_paths --self-test: {line!r} gave {names}, expected {expected}")
            failed += 1
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--self-test", action="store_true", help="check the reading of each form")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    allowed = read_allow(root)
    known = known_names(root)
    missing = 0
    for path in files(root):
        try:
            with open(os.path.join(root, path), encoding="utf-8") as source:
                text = source.read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary (fuzz corpora), or moved away while we walk
        folder = os.path.dirname(path)
        for number, line in lines_of(path, text):
            for name, _ in candidates(line):
                if name.startswith("build/") or any(fnmatch.fnmatch(name, a) for a in allowed):
                    continue
                if not found(root, folder, name, known):
                    print(f"{path}:{number}: '{name}' names no file or folder of the repository")
                    missing += 1
    if missing:
        print(f"check_doc_paths: {missing} name(s) lead nowhere; fix the name, or, if it is "
              f"another project's file, add it to {ALLOW} with the reason", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
