#!/usr/bin/env bash
# Two builds of this project, benchmark by benchmark, alternating A B A B ... so both see the
# same machine load: MirroredStrategy 1x1, 1x2 and 2x1 on the CNN (images/s), the one-device
# step (ms, OneDeviceStrategy), and 2 workers x 1 replica under dist-launch on the CNN and
# the MLP with and without overlap (images/s). Prints each median and after / before.
# A directory holds tools/ and bench/ as a build tree does.
#   bench/compare_builds.sh BEFORE_DIR AFTER_DIR [rounds=5] [steps=30]
set -euo pipefail
before=$1
after=$2
rounds=${3:-5}
steps=${4:-30}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ips() { sed -nE 's/.* ([0-9]+) images\/s.*/\1/p' | tail -1; }
ms() { sed -nE 's/^OneDeviceStrategy step: +([0-9.]+) ms.*/\1/p'; }

measure() {  # measure DIR NAME
  local dir=$1 name=$2
  export DIST_STORE_HOST=$dir/tools/dist-store-host
  case $name in
    mirrored_1x1 | mirrored_1x2 | mirrored_2x1)
      "$dir/bench/mirrored_scaling_bench" 3 "$steps" "${name#mirrored_}" | ips ;;
    one_device_ms) "$dir/bench/strategy_overhead_bench" 5 "$steps" | ms ;;
    mw_cnn) "$dir/tools/dist-launch" --workers 2 -- "$dir/bench/multi_worker_bench" multi_worker cnn "$steps" | ips ;;
    mw_cnn_no_overlap) "$dir/tools/dist-launch" --workers 2 -- "$dir/bench/multi_worker_bench" multi_worker_after_backward cnn "$steps" | ips ;;
    mw_mlp) "$dir/tools/dist-launch" --workers 2 -- "$dir/bench/multi_worker_bench" multi_worker mlp 10 | ips ;;
  esac
}

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'); flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|fma)$' | tr '\n' ' ')"
for name in mirrored_1x1 mirrored_1x2 mirrored_2x1 one_device_ms mw_cnn mw_cnn_no_overlap mw_mlp; do
  a=() b=()
  for ((i = 0; i < rounds; i++)); do
    a+=("$(measure "$before" "$name")")
    b+=("$(measure "$after" "$name")")
  done
  ma=$(median "${a[@]}") mb=$(median "${b[@]}")
  echo "$name: before ${a[*]} | after ${b[*]} | medians $ma -> $mb, after/before $(echo "$mb / $ma" | bc -l | cut -c1-5)"
done
