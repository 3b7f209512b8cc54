#!/usr/bin/env bash
# The cost of the agreement before each collective (CommunicationOptions::check_collectives,
# on by default): 2 workers x 1 replica under dist-launch, dist-train as shipped against
# --unchecked-collectives, alternating so both see the same machine load, on the tutorial CNN
# (100 steps of 128) and the MLP (20 steps of 128). Prints the training images/s of each run,
# the medians and checked / unchecked.
#   bench/collective_check_cost.sh BUILD_DIR [rounds=5]
set -euo pipefail
build=$1
rounds=${2:-5}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

run() {  # run MODEL EXAMPLES [FLAG]
  "$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" --strategy multi_worker \
    --model "$1" --epochs 1 --train-examples "$2" --global-batch 128 --no-progress ${3:-} |
    sed -nE 's/^\[worker:0\] (\{.*)$/\1/p' |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["images_per_sec"]))'
}

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'); flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|fma)$' | tr '\n' ' ')"
echo "LD_PRELOAD=${LD_PRELOAD:-}"
for spec in "cnn 12800" "mlp 2560"; do
  set -- $spec
  checked=() unchecked=()
  for ((i = 0; i < rounds; i++)); do
    checked+=("$(run "$1" "$2")")
    unchecked+=("$(run "$1" "$2" --unchecked-collectives)")
  done
  mc=$(median "${checked[@]}") mu=$(median "${unchecked[@]}")
  echo "$1: checked ${checked[*]} | unchecked ${unchecked[*]} | medians $mc vs $mu, checked/unchecked $(echo "$mc / $mu" | bc -l | cut -c1-5)"
done
