#!/usr/bin/env bash
# A scaling table (Markdown): images/s of the tutorial CNN and the 784-4096-4096-10
# MLP, 64 examples per replica, Adam, as 1 replica (1 and 2 threads), 2 replicas in one process
# (MirroredStrategy), and 1 to 4 worker processes of 1 replica and 1 thread each on loopback
# (MultiWorkerMirroredStrategy under dist-launch). Median of ROUNDS runs. Prints a Markdown
# table; more workers than cores oversubscribe the machine, and the table shows what that costs.
#
#   bench/scaling_table.sh BUILD_DIR [ROUNDS=3] [STEPS=20] > table.md
set -euo pipefail
build=${1:?usage: scaling_table.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-3}
steps=${3:-20}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
last_ips() { sed -nE 's/.* ([0-9]+) images\/s.*/\1/p' | tail -1; }

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores," \
     "flags $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo
echo "| layout | processes x replicas x threads | CNN images/s | MLP images/s |"
echo "|---|---|---|---|"
row() {  # row LABEL SHAPE COMMAND... (the command gets the model name appended)
  local label=$1 shape=$2 cells=() samples
  shift 2
  for model in cnn mlp; do
    samples=()
    for ((r = 0; r < rounds; r++)); do samples+=("$("$@" "$model" | last_ips)"); done
    cells+=("$(median "${samples[@]}")")
  done
  echo "| $label | $shape | ${cells[0]} | ${cells[1]} |"
}
mirrored() { "$build/bench/mirrored_scaling_bench" 3 "$steps" "$1" "$2"; }
workers() { "$build/tools/dist-launch" --workers "$1" -- "$build/bench/multi_worker_bench" multi_worker "$2" "$steps"; }
row "one replica" "1 x 1 x 1" mirrored 1x1
row "one replica, 2 threads" "1 x 1 x 2" mirrored 1x2
row "MirroredStrategy" "1 x 2 x 1" mirrored 2x1
for n in 1 2 3 4; do row "MultiWorkerMirrored" "$n x 1 x 1" workers "$n"; done
