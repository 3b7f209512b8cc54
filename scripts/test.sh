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
# tests/waiting_cases.txt) run four at a time beside the paired pass, which runs at a lower
# priority (nice 10): the paired cases check no time and take the CPU the waiting ones leave,
# the waiting ones get the CPU they ask for (a fraction of a core) when they ask, so a deadline
# means what it meant alone, and their waits no longer add up (on a Zen 5 the two passes took
# 272 + 84 s one after the other, 306 s side by side). Their ports differ (each paired suite and
# waiting entry has its own DIST_PORT_BASE) and no paired case takes what a waiting one locks
# (mpirun, netns). Everything else runs alone, as the other deadline tests and those that need
# the whole machine (Slurm, network namespaces) must on a 2-core machine. The fuzzing (three
# targets at a time, 20 s of wall time each) and the install test (compilations), label
# "background", run beside the alone pass at the lowest priority (nice 19, set by the tests):
# they check no deadline and take only the CPU the tests leave (the alone pass used about 60%
# of the cores), so their minutes no longer add up; beside the paired pass they would get
# almost no CPU, and the fuzzing's 20 s would find little.
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
# Passes that run beside another: start_beside NAME NICENESS CTEST_ARGS... starts one in the
# background (its output to $build/Testing/NAME.log), finish_beside NAME TITLE waits for it and
# prints its output and time.
mkdir -p "$build/Testing"
declare -A beside=()
trap 'kill "${beside[@]}" 2>/dev/null || true' EXIT
start_beside() {
  local name=$1 niceness=$2
  shift 2
  rm -f "$build/Testing/$name.seconds"
  (
    started=$SECONDS
    code=0
    nice -n "$niceness" ctest --test-dir "$build" --output-on-failure --timeout 1200 "$@" \
      >"$build/Testing/$name.log" 2>&1 || code=$?
    echo "$((SECONDS - started))" >"$build/Testing/$name.seconds"
    exit "$code"
  ) &
  beside[$name]=$!
}
finish_beside() {
  local name=$1 title=$2
  echo "== $title"
  wait "${beside[$name]}" || status=1
  unset "beside[$name]"
  cat "$build/Testing/$name.log"
  passes+=("$(cat "$build/Testing/$name.seconds" 2>/dev/null || echo '?') s  $title")
}
tests_started=$SECONDS
run_pass "tests that run two at a time (label parallel)" -j 2 -L parallel -LE "$skip"
window_started=$SECONDS
start_beside paired 10 -j 2 -L paired -LE "$skip"
run_pass "tests that wait out timeouts (label waiting, beside the paired pass)" -j 4 -L waiting \
  -LE "$skip"
finish_beside paired "multi-process tests that run two at a time (label paired, nice 10)"
passes+=("$((SECONDS - window_started)) s  the two side by side")
# The background tests set their own priority (nice 19).
start_beside background 0 -j 2 -L background -LE "$skip"
run_pass "tests that run alone (deadlines, loopback servers, Slurm, namespaces)" \
  -LE "parallel|paired|waiting|background|$skip"
finish_beside background "the fuzzing and the install test (label background, beside the alone pass)"
echo "== the passes took"
printf '  %s\n' "${passes[@]}"
echo "  $((SECONDS - tests_started)) s in all"
exit "$status"
