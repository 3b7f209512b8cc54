#!/usr/bin/env bash
# Install, build, then run every test (unit and multi-process). Tests labelled "long" (accuracy
# runs) are skipped unless DIST_LONG_TESTS=1.
#
# The suites listed in tests/parallel_suites.txt (one process, no sockets, no elapsed-time
# checks) run two at a time; everything else runs alone, as the multi-process and deadline tests
# need on a 2-core machine. Both passes always run; the exit status is non-zero if either failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build=${BUILD_DIR:-build}
# The fuzz targets are a clang/ASan build of their own (about 2 minutes); building them here
# leaves the "fuzz" test only the fuzzing (its own rebuild check is then a no-op).
status=0
tests/fuzz/run_fuzz.sh "$build" --build-only || status=1
exclude=(-LE "long")
[[ ${DIST_LONG_TESTS:-0} == 1 ]] && exclude=()

suites=$(grep -vE '^[[:space:]]*(#|$)' tests/parallel_suites.txt | paste -sd '|')
# A parameterized test's name starts with its instantiation's prefix ("Checkpoint/...").
parallel="^([A-Za-z0-9_]+/)?(${suites})\\."

echo "== tests that run two at a time (tests/parallel_suites.txt)"
ctest --test-dir "$build" --output-on-failure --timeout 600 -j 2 -R "$parallel" "${exclude[@]}" ||
  status=1
echo "== tests that run alone (child processes, loopback networking, deadlines, fuzz, install)"
ctest --test-dir "$build" --output-on-failure --timeout 600 -E "$parallel" "${exclude[@]}" ||
  status=1
exit "$status"
