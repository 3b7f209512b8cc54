#!/usr/bin/env bash
# Speed of sharding on one host (issue 35, docs/sharding.md): the 20M-parameter MLP (or MODEL),
# 2 worker processes x 1 replica x 1 thread (dist-launch, shared memory between them), 64
# examples per worker per step, Adam; dist-train --sharding none | optimizer | gradients |
# parameters against PyTorch DDP (bench/pytorch_ddp_cnn.py, 2 gloo processes, tcmalloc preloaded),
# alternating (A B C D A B C D ...), REPEATS rounds; prints medians and ratios.
# dist-train's figure is its training images/s (the JSON images_per_sec: training steps only,
# start-up, evaluation and the first epoch's warm-up included in none of them: 2 epochs of
# STEPS steps, the second's epoch line); DDP's is its median over rounds of timed steps.
#
#   bench/sharding_speed.sh [build-dir=build] [repeats=3] [steps=40] [model=mlp]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
repeats=${2:-3}
steps=${3:-40}
model=${4:-mlp}
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# The last epoch line's images/s (the second epoch: no warm-up in it).
epoch_ips() { sed -nE 's/.*Epoch 2: .* ([0-9]+) images\/s.*/\1/p' | tail -1; }
declare -A runs m
levels=(none optimizer gradients parameters)
for ((i = 0; i < repeats; i++)); do
  for level in "${levels[@]}"; do
    ips=$("$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" \
      --strategy multi_worker --model "$model" --threads 1 --batch-per-replica 64 \
      --train-examples $((128 * steps)) --test-examples 1280 --epochs 2 --sharding "$level" \
      --no-progress 2>&1 |
      epoch_ips)
    runs[$level]+="${ips:-0} "
  done
  ddp=$(cd "$here" && LD_PRELOAD=$tcmalloc /usr/bin/python3 bench/pytorch_ddp_cnn.py 3 \
    $((steps / 3)) "$model" | sed -nE 's/.* ([0-9.]+) images\/s.*/\1/p' | tail -1)
  runs[ddp]+="${ddp:-0} "
  echo "round $i (images/s): $(for k in none optimizer gradients parameters ddp; do
    printf '%s %s  ' "$k" "$(echo ${runs[$k]} | awk '{print $NF}')"; done)"
done
for k in none optimizer gradients parameters ddp; do
  m[$k]=$(median ${runs[$k]})
  echo "$model median images/s, $k: ${m[$k]} (runs: ${runs[$k]})"
done
for level in optimizer gradients parameters; do
  echo "$model $level / none: $(echo "${m[$level]} / ${m[none]}" | bc -l | cut -c1-5)"
  echo "$model $level / pytorch ddp: $(echo "${m[$level]} / ${m[ddp]}" | bc -l | cut -c1-5)"
done
echo "$model none / pytorch ddp: $(echo "${m[none]} / ${m[ddp]}" | bc -l | cut -c1-5)"
