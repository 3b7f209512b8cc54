#!/usr/bin/env python3
"""Writes the skeletons of docs/how-to-extend.md's recipes as one C++ header, so that the
recipes are compiled (and run by tests/docs/doc_recipes_main.cc) as they are written.

  recipe_blocks.py DOC OUT_HEADER NAME...

A recipe's code is every ```cpp block after a line `<!-- recipe: NAME -->` (up to the next
such line or the next heading of the same level); its blocks are copied in order, each
preceded by a #line directive naming DOC and the block's first line, so that a compiler error
points at the doc. Every NAME given must have at least one block, and every recipe of the doc
must be given: a recipe dropped from the doc, or one the test does not run, stops the build.
"""
import re
import sys

MARK = re.compile(r"^<!--\s*recipe:\s*([a-z0-9-]+)\s*-->\s*$")


def blocks(doc_path):
    """Yields (recipe name, first line number of the code, code lines) of the doc."""
    recipe, in_block, code, start = None, False, [], 0
    with open(doc_path, encoding="utf-8") as doc:
        for number, line in enumerate(doc, 1):
            line = line.rstrip("\n")
            if in_block:
                if line.startswith("```"):
                    yield recipe, start, code
                    in_block, code = False, []
                else:
                    code.append(line)
                continue
            mark = MARK.match(line)
            if mark:
                recipe = mark.group(1)
            elif line.startswith("## "):
                recipe = None  # a new section: a recipe's mark does not reach past it
            elif line.startswith("```cpp") and recipe:
                in_block, start = True, number + 1
    if in_block:
        raise SystemExit(f"{doc_path}:{start - 1}: a ```cpp block of recipe '{recipe}' is not "
                         "closed")


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    doc_path, out_path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    found = {}
    text = [f"// Written by tests/docs/recipe_blocks.py from {doc_path}: do not edit.\n"]
    for recipe, start, code in blocks(doc_path):
        found[recipe] = found.get(recipe, 0) + 1
        text.append(f'#line {start} "{doc_path}"\n')
        text.append("\n".join(code) + "\n")
    missing = [name for name in names if name not in found]
    unknown = [name for name in found if name not in names]
    if missing or unknown:
        raise SystemExit(f"recipe_blocks: {doc_path} has no ```cpp block after "
                         f"'<!-- recipe: NAME -->' for {missing or 'none'}; recipes the test "
                         f"does not run: {unknown or 'none'} (tests/CMakeLists.txt lists them)")
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("".join(text))
    print(", ".join(f"{name}: {count} block(s)" for name, count in found.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
