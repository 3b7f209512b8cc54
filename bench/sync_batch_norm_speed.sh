#!/usr/bin/env bash
# Speed of synchronized batch normalization against per-replica batch normalization (issue
# 36): the Mirrored Strategy tutorial's ResNet (dist-train --model resnet, 16 BatchNormalization
# layers, 2.79M parameters), 64 examples per replica, Adam, under
#   mirrored      one process of 2 replicas (threads)
#   multi_worker  2 worker processes of 1 replica (dist-launch, shared memory between them)
# each with its batch normalization synchronized (the default: one all-reduce per layer in
# forward and one in backward) and with --no-sync-batch-norm, alternating (sync, per-replica,
# sync, ...) for REPEATS rounds. The figure is dist-train's training images/s of the second of
# 2 epochs of STEPS steps (start-up, evaluation and the first epoch's warm-up excluded); the
# ratio sync / per-replica is taken per round and its median printed. (PyTorch's SyncBatchNorm
# runs on CUDA only, so there is no CPU peer to compare with.)
#
#   bench/sync_batch_norm_speed.sh [build-dir=build] [repeats=3] [steps=30] [loop=custom]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repeats=${2:-3}
steps=${3:-30}
loop=${4:-custom}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
epoch_ips() { sed -nE 's/.*Epoch 2: .* ([0-9]+) images\/s.*/\1/p' | tail -1; }
common=(--model resnet --loop "$loop" --batch-per-replica 64 --train-examples $((128 * steps))
  --test-examples 256 --epochs 2 --no-progress)
run() {  # strategy, then "" or --no-sync-batch-norm
  if [[ $1 == mirrored ]]; then
    "$build/tools/dist-train" --strategy mirrored --replicas 2 "${common[@]}" ${2:+"$2"} 2>&1 |
      epoch_ips
  else
    "$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" --strategy multi_worker \
      --threads 1 "${common[@]}" ${2:+"$2"} 2>&1 | epoch_ips
  fi
}
for strategy in mirrored multi_worker; do
  sync_runs="" local_runs="" ratios=""
  for ((i = 0; i < repeats; i++)); do
    s=$(run "$strategy" "")
    l=$(run "$strategy" --no-sync-batch-norm)
    sync_runs+="${s:-0} " local_runs+="${l:-0} "
    ratios+="$(echo "${s:-0} / ${l:-1}" | bc -l | cut -c1-5) "
    echo "$strategy round $i (images/s): synchronized ${s:-0}, per-replica ${l:-0}"
  done
  echo "$strategy median images/s: synchronized $(median $sync_runs) (runs: $sync_runs)," \
    "per-replica $(median $local_runs) (runs: $local_runs)"
  echo "$strategy synchronized / per-replica, median of per-round ratios: $(median $ratios)" \
    "(rounds: $ratios)"
done
