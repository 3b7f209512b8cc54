#!/usr/bin/env bash
# Turns every ```cpp block of README.md into a translation unit of the consumer project:
# its #include lines at the top, the rest as the body of `void readme_block_N()`, and a main
# that refers to every block, so the README's code is compiled and linked as a user would,
# against the installed package.
#   readme_blocks.sh README.md OUT_DIR
set -euo pipefail
readme=$1
out=$2
mkdir -p "$out"
awk -v out="$out" '
  /^```cpp/ { n++; inblock = 1; inc = ""; body = ""; next }
  /^```/ && inblock {
    file = out "/readme_block_" n ".cc"
    printf "%s\n// README.md, C++ block %d\nvoid readme_block_%d() {\n%s}\n", inc, n, n, body > file
    close(file)
    inblock = 0
    next
  }
  inblock && /^#include/ { inc = inc $0 "\n"; next }
  inblock { body = body $0 "\n" }
  END {
    main = out "/readme_main.cc"
    for (i = 1; i <= n; i++) printf "void readme_block_%d();\n", i > main
    printf "int main(int argc, char**) {\n  // Compiled and linked, not run (they train for minutes).\n" > main
    for (i = 1; i <= n; i++) printf "  if (argc > 99) readme_block_%d();\n", i > main
    printf "  return 0;\n}\n" > main
    print n
  }' "$readme"
