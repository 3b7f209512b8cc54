#!/usr/bin/env bash
# Install, build, then run every test (unit and multi-process). Tests labelled "long" (accuracy
# runs) are skipped unless DIST_LONG_TESTS=1.
#
# A single-process suite is one ctest test (tests/discover_tests.cmake); those labelled
# "parallel" (tests/parallel_suites.txt: no sockets, no elapsed-time checks) run two at a time.
# The multi-process cases labelled "paired" (tests/paired_cases.txt: they mostly wait on their
# child processes, assert no elapsed time and share nothing machine-wide) run two suites at a
# time too, a suite's paired cases one after another in one process, each suite with ports of
# its own. The cases that mostly sleep on timeouts and check deadlines (label "waiting",
# tests/waiting_cases.txt) run four at a time. Everything else runs alone, as the other deadline
# tests and those that need the whole machine (Slurm, network namespaces) must on a 2-core
# machine. The fuzzing (three targets at a time, 20 s of wall time each) and the install test
# (compilations), label "background", start with the waiting pass and go on beside the alone
# pass, at the lowest priority: they check no deadline and take only the CPU the tests leave
# (the waiting and alone passes used about 60% of the cores), so their minutes no longer add up.
# Every pass always runs; the exit status is non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh --all
build=${BUILD_DIR:-build}
# The fuzz targets are a clang/ASan build of their own (about 2 minutes); building them here
# leaves the "fuzz" test only the fuzzing (its own rebuild check is then a no-op).
status=0
tests/fuzz/run_fuzz.sh "$build" --build-only || status=1
# OpenMP's threads sleep when idle instead of spinning: the tests run several LibTorch processes
# on 2 cores, where a spinning thread only takes a core from a process that has work (a short
# dist-train run used 1.3 s of CPU spinning, 0.65 s passive; the arithmetic is the same).
# Benchmarks (bench/) keep the default.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
skip="long"
[[ ${DIST_LONG_TESTS:-0} == 1 ]] && skip="^$"

# Runs one pass (its title, then ctest's arguments) and says how long it took: the figures of
# docs/how-to-extend.md come from these lines.
passes=()
run_pass() {
  local title=$1 started=$SECONDS
  shift
  echo "== $title"
  ctest --test-dir "$build" --output-on-failure --timeout 1200 "$@" || status=1
  passes+=("$((SECONDS - started)) s  $title")
}
tests_started=$SECONDS
run_pass "tests that run two at a time (label parallel)" -j 2 -L parallel -LE "$skip"
run_pass "multi-process tests that run two at a time (label paired)" -j 2 -L paired -LE "$skip"
# Started here, waited for after the alone pass; its output follows the passes'.
background_log=$build/Testing/background.log
mkdir -p "$build/Testing"
background_seconds=$build/Testing/background.seconds
rm -f "$background_seconds"
(
  started=$SECONDS
  code=0
  ctest --test-dir "$build" --output-on-failure --timeout 1200 -j 2 -L background -LE "$skip" \
    >"$background_log" 2>&1 || code=$?
  echo "$((SECONDS - started))" >"$background_seconds"
  exit "$code"
) &
background=$!
trap 'kill "$background" 2>/dev/null || true' EXIT
run_pass "tests that wait out timeouts (label waiting)" -j 4 -L waiting -LE "$skip"
run_pass "tests that run alone (deadlines, loopback servers, Slurm, namespaces)" \
  -LE "parallel|paired|waiting|background|$skip"
echo "== the fuzzing and the install test beside the last two (label background)"
wait "$background" || status=1
cat "$background_log"
passes+=("$(cat "$background_seconds" 2>/dev/null || echo '?') s  the fuzzing and the install test (beside the last two)")
echo "== the passes took"
printf '  %s\n' "${passes[@]}"
echo "  $((SECONDS - tests_started)) s in all"
exit "$status"
