#!/usr/bin/env bash
# Turns every ```cpp block of the given Markdown files (README.md and the docs pages) into a
# translation unit of the consumer project: its #include lines at the top, the rest as the body
# of `void doc_block_N()`, and a main that refers to every block, so the documentation's code is
# compiled and linked as a user would, against the installed package. N counts across all the
# files, so names are unique; a comment in each unit names its file and its block number there.
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
  /^```cpp/ { n++; k++; inblock = 1; inc = ""; body = ""; next }
  /^```/ && inblock {
    file = out "/doc_block_" n ".cc"
    printf "%s\n// %s, C++ block %d\nvoid doc_block_%d() {\n%s}\n", inc, FILENAME, k, n, body > file
    close(file)
    inblock = 0
    next
  }
  inblock && /^#include/ { inc = inc $0 "\n"; next }
  inblock { body = body $0 "\n" }
  END {
    if (inblock) { printf "%s: a ```cpp block is not closed\n", previous > "/dev/stderr"; exit 1 }
    if (previous != "") printf "%s: %d C++ blocks\n", previous, k > "/dev/stderr"
    main = out "/doc_blocks_main.cc"
    for (i = 1; i <= n; i++) printf "void doc_block_%d();\n", i > main
    printf "int main(int argc, char**) {\n  // Compiled and linked, not run (they train for minutes).\n" > main
    for (i = 1; i <= n; i++) printf "  if (argc > 99) doc_block_%d();\n", i > main
    printf "  return 0;\n}\n" > main
    print n + 0
  }' "$@"
