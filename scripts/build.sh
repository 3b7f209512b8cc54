#!/usr/bin/env bash
# Installs the dependencies (if missing) and builds into ${BUILD_DIR:-build}.
#
#   scripts/build.sh         the library and its tools (dist-train, dist-launch, dist-store-host):
#                            what the main job needs, nothing else
#   scripts/build.sh --all   that, and every test, benchmark and example
set -euo pipefail
cd "$(dirname "$0")/.."
all=0
case ${1:-} in
  "") ;;
  --all) all=1 ;;
  *)
    echo "usage: $0 [--all]" >&2
    exit 2
    ;;
esac
deps=(scripts/install-deps.sh)
((all)) && deps+=(--tests)
if [[ $(id -u) -eq 0 ]]; then "${deps[@]}"; else sudo "${deps[@]}"; fi

build=${BUILD_DIR:-build}
if ((all)); then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDIST_BUILD_TESTS=ON -DDIST_BUILD_BENCH=ON \
    -DDIST_BUILD_EXAMPLES=ON
  cmake --build "$build" -j "$(nproc)"
else
  # A build directory made by --all keeps its options (nothing is dropped from it); a new one
  # is configured without the tests, which would need the test-only packages.
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDIST_BUILD_TESTS=OFF \
      -DDIST_BUILD_BENCH=OFF -DDIST_BUILD_EXAMPLES=OFF
  fi
  cmake --build "$build" -j "$(nproc)" --target dist-tools
fi
