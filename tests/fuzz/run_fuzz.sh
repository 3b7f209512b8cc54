#!/usr/bin/env bash
# Builds the parser fuzz targets (tests/fuzz: clang, libFuzzer, ASan, UBSan) into BUILD_DIR/fuzz
# and runs each for SECONDS (default 30). Exits 0 only if everything built and no target found
# anything; otherwise prints the target's report and where its crash input was written.
#
#   tests/fuzz/run_fuzz.sh BUILD_DIR [SECONDS]
#   tests/fuzz/run_fuzz.sh BUILD_DIR --build-only   (scripts/test.sh, before the tests)
#
# Reruns are incremental: the build, and each target's corpus (BUILD_DIR/fuzz/corpus/<name>),
# which grows from the seeds each target writes and the inputs checked in under
# tests/fuzz/corpus/<name> (including the inputs of bugs found and fixed, replayed every run).
# DIST_FUZZ_CXX picks the compiler (default clang++-14).
set -uo pipefail

if (($# < 1)); then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
source_dir=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1/fuzz"
out=$(cd "$1/fuzz" && pwd)
seconds=${2:-30}
build_only=0
if [[ $seconds == --build-only ]]; then
  build_only=1
elif [[ ! $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: SECONDS must be a positive whole number or --build-only, not '$seconds'" >&2
  exit 2
fi
cxx=${DIST_FUZZ_CXX:-clang++-14}
targets=(checkpoint_fuzz cifar10_fuzz example_fuzz idx_fuzz image_fuzz safetensors_fuzz tf_config_fuzz
         tfrecord_fuzz)

die() {
  echo "fuzz: FAILED: $*" >&2
  exit 1
}

# ---- build -------------------------------------------------------------------------------
command -v "$cxx" >/dev/null ||
  die "$cxx not found; the fuzz targets need Debian's clang-14 and libclang-rt-14-dev" \
    "(bash scripts/install-deps.sh installs them)"
runtime=$("$cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a)
[[ -f $runtime ]] ||
  die "$cxx has no libFuzzer runtime (libclang_rt.fuzzer-x86_64.a); install libclang-rt-14-dev" \
    "(bash scripts/install-deps.sh)"

build_log=$out/build.log
echo "fuzz: building the targets with $cxx into $out (log: $build_log)"
if ! { cmake -S "$source_dir" -B "$out/build" -DCMAKE_CXX_COMPILER="$cxx" &&
  cmake --build "$out/build" -j "${DIST_FUZZ_JOBS:-2}"; } >"$build_log" 2>&1; then
  tail -n 60 "$build_log" >&2
  die "the clang/ASan build of the fuzz targets failed (full log: $build_log)"
fi
if ((build_only)); then
  echo "fuzz: built ${targets[*]}"
  exit 0
fi

# ---- run ---------------------------------------------------------------------------------
# One OpenMP thread: the inputs are tiny, and the machine is shared with other builds.
export OMP_NUM_THREADS=1
# LeakSanitizer stays on: a leak on a rejected input is a finding too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Fuzzes one target; its report goes to $out/<name>.report and its status is the exit code.
fuzz_one() {
  local target=$1 name=${1%_fuzz}
  local corpus=$out/corpus/$name seeds=$out/seeds/$name artifacts=$out/artifacts/$name
  local log=$out/$name.log
  mkdir -p "$corpus" "$artifacts"
  rm -rf "$seeds"
  # -runs=0: should a target not know DIST_FUZZ_WRITE_SEEDS, it must not start fuzzing here.
  if ! DIST_FUZZ_WRITE_SEEDS=$seeds "$out/build/$target" -runs=0 >"$log" 2>&1; then
    echo "fuzz: $target failed writing its seeds:" && cat "$log"
    return 1
  fi
  mkdir -p "$seeds"
  local dirs=("$corpus" "$seeds")
  [[ -d $source_dir/corpus/$name ]] && dirs+=("$source_dir/corpus/$name")
  # The first directory receives the new inputs; the others are only read.
  nice -n "${DIST_FUZZ_NICE:-0}" "$out/build/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" "${dirs[@]}" >"$log" 2>&1
  local status=$?
  if ((status == 0)); then
    local done_line cov_line
    done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -n 1)
    cov_line=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    echo "fuzz: $target: ${done_line:-no stats line} | ${cov_line:-}"
    return 0
  fi
  echo "fuzz: $target FOUND A PROBLEM (exit $status); its report (full log: $log):"
  grep -n -E 'ERROR|FINDING|SUMMARY|runtime error|uncaught|out-of-memory|timeout' "$log" |
    head -n 20
  tail -n 40 "$log"
  grep -E 'Test unit written to|artifact' "$log" | sed 's/^/fuzz: /'
  echo "fuzz: reproduce with: $out/build/$target <crash file>"
  return 1
}

# Each target is one single-threaded process: DIST_FUZZ_JOBS of them (default 2, the cores of
# the machine the suite is sized for) run at a time, each for the full SECONDS of wall time.
# DIST_FUZZ_NICE (default 0) lowers their priority: the suite fuzzes beside tests that check
# deadlines, and those must get a core whenever they want one; the fuzzing takes what is left.
at_once=${DIST_FUZZ_JOBS:-2}
declare -A pid_of
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= at_once)); do wait -n || true; done
  fuzz_one "$target" >"$out/${target%_fuzz}.report" 2>&1 &
  pid_of[$target]=$!
done
failed=()
for target in "${targets[@]}"; do
  if wait "${pid_of[$target]}"; then
    cat "$out/${target%_fuzz}.report"
  else
    cat "$out/${target%_fuzz}.report" >&2
    failed+=("$target")
  fi
done

if ((${#failed[@]} > 0)); then
  die "${failed[*]}"
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds} s each without a finding"
