#!/usr/bin/env bash
# Install, build, then run every test (unit and multi-process). Tests labelled "long" (accuracy
# runs) are skipped unless DIST_LONG_TESTS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build=${BUILD_DIR:-build}
exclude=(-LE "long")
[[ ${DIST_LONG_TESTS:-0} == 1 ]] && exclude=()
ctest --test-dir "$build" --output-on-failure --timeout 600 "${exclude[@]}"
