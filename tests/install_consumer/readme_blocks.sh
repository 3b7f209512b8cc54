#!/usr/bin/env bash
# Turns every ```cpp block of the given Markdown files (README.md and the docs pages) into a
# function of ONE translation unit of the consumer project, OUT_DIR/doc_blocks.cc: every block's
# #include lines at the top (each once), each block's other lines as the body of
# `void doc_block_N()`, and a main that refers to every block, so the documentation's code is
# compiled and linked as a user would, against the installed package. One unit, because each
# unit parses LibTorch's headers for about 20 s. N counts across all the files; a comment before
# each function names its file and its block number there.
# Every ```cmake block goes, as written, into OUT_DIR/doc_blocks.cmake, which the consumer
# project includes after making my_trainer (the blocks' target) of OUT_DIR/doc_blocks.cc: the
# documented CMake lines are what link the documented code.
#   readme_blocks.sh OUT_DIR FILE.md...
# Prints "FILE: K C++ blocks" for each file on stderr and the total on stdout.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT_DIR FILE.md..." >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out"
awk -v out="$out" '
  FNR == 1 {
    if (inblock) { printf "%s: a ```cpp block is not closed\n", previous > "/dev/stderr"; exit 1 }
    if (previous != "") printf "%s: %d C++ blocks\n", previous, k > "/dev/stderr"
    previous = FILENAME; k = 0
  }
  /^```cmake/ { incmake = 1; cmake = cmake sprintf("# %s\n", FILENAME); next }
  /^```/ && incmake { incmake = 0; next }
  incmake { cmake = cmake $0 "\n"; next }
  /^```cpp/ {
    n++; k++; inblock = 1
    functions = functions sprintf("\n// %s, C++ block %d\nvoid doc_block_%d() {\n", FILENAME, k, n)
    next
  }
  /^```/ && inblock { functions = functions "}\n"; inblock = 0; next }
  inblock && /^#include/ { if (!($0 in seen)) { seen[$0] = 1; includes = includes $0 "\n" }; next }
  inblock { functions = functions $0 "\n" }
  END {
    if (inblock) { printf "%s: a ```cpp block is not closed\n", previous > "/dev/stderr"; exit 1 }
    if (previous != "") printf "%s: %d C++ blocks\n", previous, k > "/dev/stderr"
    file = out "/doc_blocks.cc"
    printf "%s%s\nint main(int argc, char**) {\n", includes, functions > file
    printf "  // Compiled and linked, not run (they train for minutes).\n" > file
    for (i = 1; i <= n; i++) printf "  if (argc > 99) doc_block_%d();\n", i > file
    printf "  return 0;\n}\n" > file
    printf "%s", cmake > (out "/doc_blocks.cmake")
    print n + 0
  }' "$@"
