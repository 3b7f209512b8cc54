#!/usr/bin/env python3
"""Checks every #include of src/, include/ and tools/ against the layer table docs/layers.txt.

  check_layers.py [--root DIR]            prints each include that breaks a rule, as
                                          path:line: #include "x": the rule, and each circle
                                          among files (a header and its .cc count as one:
                                          a.h/.cc includes b.h, whose b.cc includes a.h); exit 1
                                          if any
  check_layers.py --planted [--root DIR]  the check of the check: copies a few files of DIR into
                                          a temporary tree, checks that it is clean, plants one bad
                                          include and checks that exactly that line is reported

An include resolves as the compiler resolves it: the including file's folder, then include/,
then src/, then the generated headers the table lists. docs/layers.txt says whose module each
file is and which modules each may include. Exit status 2: the table or the arguments are wrong.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

TABLE = "docs/layers.txt"
SCANNED = ("src", "include", "tools")
SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(dist/[^>]+)>)')


def read_table(root):
    """Returns ({module: set of allowed dependencies}, set of generated header names,
    {path: module} of the files placed by hand)."""
    path = os.path.join(root, TABLE)
    allowed, generated, placed = {}, set(), {}
    with open(path, encoding="utf-8") as table:
        for number, line in enumerate(table, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            module, colon, rest = line.partition(":")
            if not colon:
                sys.exit(f"{path}:{number}: expected 'module: dependencies', got '{line}'")
            if module.strip() == "generated":
                generated.update(rest.split())
            elif module.strip() == "place" and len(rest.split()) == 2:
                placed[rest.split()[0]] = rest.split()[1]
            else:
                allowed[module.strip()] = set(rest.split())
    for module, deps in allowed.items():
        for dep in deps:
            if dep.removeprefix("dist/") not in allowed:
                sys.exit(f"{path}: {module} may include '{dep}', which is no module of the table")
    for file, module in placed.items():
        if module not in allowed:
            sys.exit(f"{path}: {file} is placed in '{module}', which is no module of the table")
    return allowed, generated, placed


def module_of(path, generated, placed):
    """The module of a repository-relative path (or of a generated header's name), or None."""
    parts = path.split("/")
    if path in placed:
        return placed[path]
    if path in generated:
        return parts[0]
    if parts[0] == "include" and len(parts) > 3 and parts[1] == "dist":
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        if parts[1] == "distribute":
            return "distribute/" + parts[2] if len(parts) > 3 else None
        return parts[1]
    if parts[0] == "tools":
        return "tools"
    return None


def resolve(root, including, target, generated):
    """Where `#include "target"` in the file `including` leads: a repository-relative path, the
    generated header's name, or None."""
    for folder in (os.path.dirname(including), "include", "src"):
        candidate = os.path.normpath(os.path.join(folder, target))
        if not candidate.startswith("..") and os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return target if target in generated else None


def breaks(root, allowed, generated, placed):
    """Yields 'path:line: #include "x": rule' for every include that breaks a rule."""
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    path = os.path.relpath(os.path.join(folder, name), root)
                    yield from breaks_of_file(root, path, allowed, generated, placed)


def breaks_of_file(root, path, allowed, generated, placed):
    module = module_of(path, generated, placed)
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
        lines = list(source)
    if module not in allowed:
        yield f"{path}:1: the file belongs to no module of {TABLE} (module '{module}')"
        return
    for number, line in enumerate(lines, 1):
        match = INCLUDE.match(line)
        if not match:
            continue
        target = match.group(1) or match.group(2)
        where = f'{path}:{number}: #include "{target}"'
        found = resolve(root, path, target, generated)
        if found is None:
            yield f"{where}: resolves to no file of the repository and no generated header"
            continue
        theirs = module_of(found, generated, placed)
        public = found.startswith("include/")
        if path.startswith("include/") and not public:
            yield (f"{where}: a public header includes {found}, which is private (an installed "
                   "header cannot find it)")
        elif theirs is None:
            yield f"{where}: {found} belongs to no module of {TABLE}"
        elif theirs == module:
            continue
        elif theirs in allowed[module] or (public and "dist/" + theirs in allowed[module]):
            continue
        elif allowed[module] and all(dep.startswith("dist/") for dep in allowed[module]):
            yield (f"{where}: {module} may include only public headers (include/dist/) and its "
                   f"own, and {found} is private ({theirs})")
        else:
            deps = " ".join(sorted(allowed[module])) or "nothing"
            yield (f"{where}: {module} may not include {theirs} ({found}); {TABLE} allows "
                   f"{module}: {deps}")


def include_graph(root, generated):
    """{unit: set of units it includes}, a unit being a path without its suffix (a header and
    its source are one unit)."""
    graph = {}
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                unit = os.path.splitext(path)[0]
                edges = graph.setdefault(unit, set())
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
                    for line in source:
                        match = INCLUDE.match(line)
                        found = match and resolve(root, path, match.group(1) or match.group(2),
                                                  generated)
                        if found and found not in generated:
                            edges.add(os.path.splitext(found)[0])
                edges.discard(unit)
    return graph


def circles(root, generated):
    """Yields 'circle among files: a -> b -> a' for each group of units that include each
    other (Tarjan's strongly connected components, iteratively)."""
    graph = include_graph(root, generated)
    index, low, stack, on_stack, counter = {}, {}, [], set(), [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            unit, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[unit] = min(low[unit], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[unit])
            if low[unit] == index[unit]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == unit:
                        break
                if len(group) > 1:
                    group.sort()
                    yield "circle among files: " + " -> ".join(group + group[:1])


def check(root):
    allowed, generated, placed = read_table(root)
    found = list(breaks(root, allowed, generated, placed)) + list(circles(root, generated))
    for line in found:
        print(line)
    if found:
        print(f"check_layers: {len(found)} include(s) or circle(s) break {TABLE}", file=sys.stderr)
    return 1 if found else 0


# The planted check copies these files and every file they include, transitively: a tree that is
# clean on its own. The bad include goes into the first one, after its first line.
PLANT_FILES = ["src/core/crc32c.cc", "src/data/sources/file_bytes.cc"]
PLANT_TARGET = "data/sources/file_bytes.h"  # core may not include data


def copy_closure(root, tree, generated):
    todo, seen = list(PLANT_FILES), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        os.makedirs(os.path.join(tree, os.path.dirname(path)), exist_ok=True)
        shutil.copy(os.path.join(root, path), os.path.join(tree, path))
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
            for line in source:
                match = INCLUDE.match(line)
                if match:
                    found = resolve(root, path, match.group(1) or match.group(2), generated)
                    if found and found not in generated:
                        todo.append(found)
    os.makedirs(os.path.join(tree, "docs"))
    shutil.copy(os.path.join(root, TABLE), os.path.join(tree, TABLE))
    return seen


def run_on(tree):
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", tree],
                            capture_output=True, text=True)
    return result.returncode, result.stdout.splitlines()


def planted(root):
    _, generated, _ = read_table(root)
    with tempfile.TemporaryDirectory(prefix="check_layers.") as tree:
        copied = copy_closure(root, tree, generated)
        status, lines = run_on(tree)
        if status != 0 or lines:
            print(f"check_layers --planted: the copied tree ({len(copied)} files) should be "
                  f"clean, but the check exited {status} with:", *lines, sep="\n")
            return 1
        victim = os.path.join(tree, PLANT_FILES[0])
        with open(victim, encoding="utf-8") as source:
            text = source.readlines()
        text.insert(1, f'#include "{PLANT_TARGET}"\n')
        with open(victim, "w", encoding="utf-8") as source:
            source.writelines(text)
        status, lines = run_on(tree)
        expected = f'{PLANT_FILES[0]}:2: #include "{PLANT_TARGET}": core may not include data'
        if status != 1 or len(lines) != 1 or not lines[0].startswith(expected):
            print(f"check_layers --planted: expected exit 1 and one line starting\n  {expected}\n"
                  f"got exit {status} and {len(lines)} line(s):", *lines, sep="\n")
            return 1
        print(f"check_layers --planted: {len(copied)} files copied, clean; the planted include "
              f"is reported alone:\n  {lines[0]}")
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--planted", action="store_true")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if not os.path.isfile(os.path.join(root, TABLE)):
        print(f"check_layers: no {TABLE} under {root}", file=sys.stderr)
        return 2
    return planted(root) if args.planted else check(root)


if __name__ == "__main__":
    sys.exit(main())
