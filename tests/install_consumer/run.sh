#!/usr/bin/env bash
# Installs the built project into a temporary prefix, then configures, builds and runs a
# separate project that uses find_package(distribute), and compiles every C++ block of
# README.md, docs/guide.md and docs/clusters.md against the installed package
# (readme_blocks.sh).
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
doc_files=(README.md docs/guide.md docs/clusters.md)
blocks=$(cd "$source_dir/../.." && "$source_dir/readme_blocks.sh" "$work/readme" "${doc_files[@]}")
echo "${doc_files[*]}: $blocks C++ blocks in all"
[[ $blocks -ge 3 ]] || {
  echo "expected at least 3 C++ blocks in ${doc_files[*]}, found $blocks" >&2
  exit 1
}
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DREADME_BLOCKS_DIR="$work/readme" > /dev/null
if ! cmake --build "$work/build" -j 2 > "$work/build.log" 2>&1; then
  grep -E "error|doc_block" "$work/build.log" | head -40 >&2
  exit 1
fi
# distribute::allocator gave the consumer the allocator the package was built with.
allocator=$(sed -nE 's/^DIST_ALLOCATOR:STRING=(.*)/\1/p' "$build_dir/CMakeCache.txt")
[[ $allocator == system ]] && allocator=glibc
"$work/build/consumer" | tee /dev/stderr | grep -q "consumer: 42 (malloc: $allocator)"
"$work/build/readme_blocks"
