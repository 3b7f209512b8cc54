#!/usr/bin/env bash
# dist-train's images/s with the C library's malloc and with each allocator Debian ships,
# preloaded (LD_PRELOAD), alternating runs; prints the median of each and its ratio to glibc.
# Evidence for choosing the allocator the project links (issue "Speed out of the box").
#
#   bench/compare_allocators.sh BUILD_DIR [ROUNDS]
#
# Needs libtcmalloc-minimal4, libjemalloc2 and libmimalloc2.0 (apt-get install); an allocator
# that is not installed is left out. Workloads: one_device and mirrored x2 on the tutorial CNN
# and the 784-4096-4096-10 MLP, 40 steps of 128 images after start-up.
set -euo pipefail
build=${1:?usage: compare_allocators.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
train=$build/tools/dist-train
lib=/usr/lib/x86_64-linux-gnu
declare -A preload=([glibc]="" [tcmalloc]=$lib/libtcmalloc_minimal.so.4
                    [jemalloc]=$lib/libjemalloc.so.2 [mimalloc]=$lib/libmimalloc.so.2)
allocators=(glibc)
for a in tcmalloc jemalloc mimalloc; do
  [[ -e ${preload[$a]} ]] && allocators+=("$a") || echo "# $a: ${preload[$a]} missing, skipped"
done
lscpu | grep -E "^Model name" | sed 's/^/# /'
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

for workload in "one_device cnn" "mirrored cnn" "one_device mlp" "mirrored mlp"; do
  read -r strategy model <<<"$workload"
  declare -A samples=()
  for ((r = 0; r < rounds; ++r)); do
    for a in "${allocators[@]}"; do
      extra=()
      [[ $strategy == mirrored ]] && extra=(--replicas 2)
      json=$(LD_PRELOAD=${preload[$a]} "$train" --strategy "$strategy" "${extra[@]}" \
        --model "$model" --global-batch 128 --max-steps 40 --epochs 1 --no-progress \
        --train-examples 60000 | tail -1)
      ips=$(sed -E 's/.*"images_per_sec":([0-9.eE+-]+).*/\1/' <<<"$json")
      samples[$a]+="$ips "
    done
  done
  base=$(tr ' ' '\n' <<<"${samples[glibc]}" | grep . | median)
  for a in "${allocators[@]}"; do
    m=$(tr ' ' '\n' <<<"${samples[$a]}" | grep . | median)
    printf '%-10s %-4s %-9s median %8.0f img/s  x%.2f of glibc  (runs: %s)\n' \
      "$strategy" "$model" "$a" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN{print a/b}')" \
      "${samples[$a]}"
  done
  unset samples
done
