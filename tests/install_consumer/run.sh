#!/usr/bin/env bash
# Installs the built project into a temporary prefix, then builds and runs a user's program
# (main.cc) against it twice, as the docs say: with CMake (find_package(distribute) and
# target_link_libraries(consumer PRIVATE distribute::dist), nothing more) and with pkg-config
# (the g++ line of docs/guide.md and README.md, run as written); each must run a step on the
# package's allocator. Every C++ block of README.md, docs/guide.md and docs/clusters.md is
# compiled and linked by the docs' own CMake blocks (readme_blocks.sh).
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
repo_dir=$(cd "$source_dir/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
doc_files=(README.md docs/guide.md docs/clusters.md)
blocks=$(cd "$repo_dir" && "$source_dir/readme_blocks.sh" "$work/readme" "${doc_files[@]}")
echo "${doc_files[*]}: $blocks C++ blocks in all"
[[ $blocks -ge 3 ]] || {
  echo "expected at least 3 C++ blocks in ${doc_files[*]}, found $blocks" >&2
  exit 1
}
grep -q "target_link_libraries(my_trainer" "$work/readme/doc_blocks.cmake" || {
  echo "no CMake block of ${doc_files[*]} links my_trainer" >&2
  exit 1
}

# What main.cc prints when it runs on the package's allocator.
allocator=$(sed -nE 's/^DIST_ALLOCATOR:STRING=(.*)/\1/p' "$build_dir/CMakeCache.txt")
[[ $allocator == system ]] && allocator=glibc
expected="consumer: 42 (malloc: $allocator,"
check_run() {  # check_run NAME BINARY
  local output
  if ! output=$("$2"); then
    echo "$1: failed: $output" >&2
    exit 1
  fi
  echo "$1: $output"
  [[ $output == "$expected"* ]] || {
    echo "$1: expected a line starting with '$expected'" >&2
    exit 1
  }
}

# 1. CMake.
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DREADME_BLOCKS_DIR="$work/readme" > /dev/null
if ! cmake --build "$work/build" -j 2 > "$work/build.log" 2>&1; then
  grep -E "error|doc_block|undefined" "$work/build.log" | head -40 >&2
  exit 1
fi
check_run "CMake consumer" "$work/build/consumer"
"$work/build/my_trainer"
# The docs' CMake lines gave their program the allocator too.
if [[ $allocator != glibc ]] && ! readelf -d "$work/build/my_trainer" | grep -q "lib$allocator"; then
  echo "my_trainer, linked by the docs' CMake blocks, does not link lib$allocator" >&2
  exit 1
fi

# 2. pkg-config: the docs' g++ line (the same in each file that has one), run as written on
# main.cc.
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists distribute || {
  echo "pkg-config finds no distribute.pc under $work/prefix/lib/pkgconfig" >&2
  exit 1
}
lines=$(cd "$repo_dir" && grep -h "pkg-config --cflags --libs distribute" "${doc_files[@]}" |
  sort -u)
[[ -n $lines && $(wc -l <<< "$lines") -eq 1 ]] || {
  echo "expected one pkg-config command line in ${doc_files[*]}, found: ${lines:-none}" >&2
  exit 1
}
[[ $lines == *"my_trainer.cc"* && $lines == *"-o my_trainer"* ]] || {
  echo "the docs' pkg-config line should compile my_trainer.cc into my_trainer: $lines" >&2
  exit 1
}
mkdir "$work/pc"
cp "$source_dir/main.cc" "$work/pc/my_trainer.cc"
if ! (cd "$work/pc" && eval "$lines") > "$work/pc.log" 2>&1; then
  echo "the docs' pkg-config line failed: $lines" >&2
  head -40 "$work/pc.log" >&2
  exit 1
fi
check_run "pkg-config consumer" "$work/pc/my_trainer"
