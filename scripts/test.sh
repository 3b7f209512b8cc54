#!/usr/bin/env bash
# Install, build, then run every test (unit and multi-process). Tests labelled "long" (accuracy
# runs) are skipped unless DIST_LONG_TESTS=1.
#
# A single-process suite is one ctest test (tests/discover_tests.cmake); those labelled
# "parallel" (tests/parallel_suites.txt: no sockets, no elapsed-time checks) run two at a time.
# The multi-process cases labelled "paired" (tests/paired_cases.txt: they mostly wait on their
# child processes, assert no elapsed time and share nothing machine-wide) run two at a time
# too, each with ports of its own. The fuzzing (one target at a time: one core) runs beside
# the cases that mostly sleep on timeouts and check deadlines (label "waiting",
# tests/waiting_cases.txt), two at a time on the other core. Everything else runs alone, as the
# other deadline tests and those that need the whole machine (Slurm, network namespaces) must
# on a 2-core machine.
# Every pass always runs; the exit status is non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --all
build=${BUILD_DIR:-build}
# The fuzz targets are a clang/ASan build of their own (about 2 minutes); building them here
# leaves the "fuzz" test only the fuzzing (its own rebuild check is then a no-op).
status=0
tests/fuzz/run_fuzz.sh "$build" --build-only || status=1
skip="long"
[[ ${DIST_LONG_TESTS:-0} == 1 ]] && skip="^$"

echo "== tests that run two at a time (label parallel)"
ctest --test-dir "$build" --output-on-failure --timeout 1200 -j 2 -L parallel -LE "$skip" ||
  status=1
echo "== multi-process tests that run two at a time (label paired)"
ctest --test-dir "$build" --output-on-failure --timeout 1200 -j 2 -L paired -LE "$skip" ||
  status=1
echo "== the fuzzing beside the tests that wait out timeouts (label waiting)"
ctest --test-dir "$build" --output-on-failure --timeout 1200 -j 3 -L waiting -LE "$skip" ||
  status=1
echo "== tests that run alone (deadlines, loopback servers, Slurm, namespaces, install)"
ctest --test-dir "$build" --output-on-failure --timeout 1200 -LE "parallel|paired|waiting|$skip" ||
  status=1
exit "$status"
