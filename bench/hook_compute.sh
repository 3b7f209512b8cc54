#!/usr/bin/env bash
# The arithmetic a compression hook adds to a step, apart from the network (issue 58: the
# constants of scripts/project_scaling.py): dist-train under MirroredStrategy with one replica
# of one thread, where the hook still runs over collectives of one member (it encodes, sums,
# decodes; PowerSGD multiplies and orthonormalizes) but nothing crosses a link. Alternates the
# compression with every pack skipping it (--compress-packs-from 10^12: the same reducer and
# pack copies, the hook bypassed) and with every pack through it (--compress-packs-from 0), and
# prints each run's milliseconds per step (64 examples), the medians and their difference: what
# the hook's own arithmetic costs a step on one thread. (Against --gradient-compression none the
# difference would also count the pack copies a hook's reducer makes: 45 ms on the MLP.)
#   bench/hook_compute.sh [build=build] [rounds=5] [compressions="bf16 powersgd:4:0"] [models="mlp cnn"]
set -euo pipefail
source "$(dirname "$0")/alternating.sh"
build=$(cd "${1:-build}" && pwd)
rounds=${2:-5}
compressions=${3:-bf16 powersgd:4:0}
models=${4:-mlp cnn}
data=${DIST_DATA_DIR:-/usr/share/datasets/fashion-mnist}

measure() {  # measure THRESHOLD MODEL: milliseconds per step of the run's one epoch
  local examples=3200
  [[ $2 == cnn ]] && examples=12800
  "$build/tools/dist-train" --strategy mirrored --replicas 1 --threads 1 --model "$2" \
    --batch-per-replica 64 --epochs 1 --train-examples "$examples" --no-progress --seed 3 \
    --data-dir "$data" --gradient-compression "$compression" --compress-packs-from "$1" |
    tail -1 | sed -nE 's/.*"images_per_sec":([0-9.]+).*/\1/p' |
    awk '{printf "%.1f\n", 64000 / $1}'
}

for compression in $compressions; do
  echo "== $compression: packs bypassing it (before) against every pack through it (after), ms a step"
  compare_alternating 1000000000000 0 "$rounds" $models |
    awk '{print} /medians/ {for (i = 1; i <= NF; i++) if ($i == "medians") {a = $(i + 1); b = $(i + 3)}
          sub(/,$/, "", b); printf "  %s the hook: %.1f ms a step (%s - %s)\n", $1, b - a, b, a}'
done
