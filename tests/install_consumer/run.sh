#!/usr/bin/env bash
# Installs the built project into a temporary prefix, then configures, builds and runs a
# separate project that uses find_package(distribute).
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/build" > /dev/null
"$work/build/consumer" | tee /dev/stderr | grep -q "consumer: 42"
