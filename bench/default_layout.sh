#!/usr/bin/env bash
# Which replica x thread layout of dist-train's main job (MirroredStrategy on Fashion-MNIST) is
# fastest on this machine: every layout whose replicas x threads fill the cores, at the same
# global batch, alternating the layouts (A B C A B C ...) so a shared machine slows them alike;
# medians of ROUNDS runs each, and each layout against the default (one replica per core).
#
#   bench/default_layout.sh BUILD_DIR [ROUNDS=3] [STEPS=60] [MODELS="cnn mlp"] [BATCH=128]
set -euo pipefail
build=${1:?usage: default_layout.sh BUILD_DIR [ROUNDS] [STEPS] [MODELS] [BATCH]}
rounds=${2:-3}
steps=${3:-60}
models=${4:-cnn mlp}
batch=${5:-128}
cores=$(nproc)
lscpu | grep -E "^Model name" | sed 's/^/# /'
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# $cores cores; global batch $batch; $steps steps a run; medians of $rounds runs"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
json_ips() { grep '"images_per_sec"' | tail -1 | sed -E 's/.*"images_per_sec":([0-9.eE+-]+).*/\1/'; }

layouts=()
for ((r = cores; r >= 1; r--)); do
  ((cores % r == 0)) && layouts+=("$r x $((cores / r))")
done
for model in $models; do
  declare -A runs=()
  for ((i = 0; i < rounds; i++)); do
    for layout in "${layouts[@]}"; do
      read -r replicas _ threads <<<"$layout"
      ips=$("$build/tools/dist-train" --strategy mirrored --model "$model" --replicas "$replicas" \
        --threads "$threads" --global-batch "$batch" --max-steps "$steps" --epochs 1 \
        --no-progress | json_ips)
      runs[$layout]+="$ips "
    done
  done
  default=$(median ${runs[${layouts[0]}]})
  for layout in "${layouts[@]}"; do
    m=$(median ${runs[$layout]})
    printf '%s: %-8s replicas x threads %7.0f images/s, %.3f of the default  (runs: %s)\n' \
      "$model" "$layout" "$m" "$(awk -v a="$m" -v b="$default" 'BEGIN {print a / b}')" \
      "${runs[$layout]}"
  done
  unset runs
done
