#!/usr/bin/env bash
# MultiWorkerMirroredStrategy, 2 worker processes x 1 replica (dist-launch), against PyTorch DDP
# with 2 gloo processes, and against 1 worker x 2 replicas in process (MirroredStrategy), on
# the tutorial CNN and the 20M-parameter MLP; and 2 workers that keep private copies of the
# variables (no shared copy, each steps the whole optimizer), and 2 workers over TCP (Gloo)
# instead of shared memory. Runs alternate (A B C D A B C D ...); prints medians and ratios.
#   bench/compare_multi_worker_ddp.sh [build-dir] [repeats=3] [steps=40]
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
steps=${3:-40}
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ips() { sed -nE 's/.* ([0-9]+) images\/s.*/\1/p' | tail -1; }
for model in cnn mlp; do
  mw=() inproc=() ddp=() private=() tcp=()
  for ((i = 0; i < repeats; i++)); do
    mw+=("$("$build/tools/dist-launch" --workers 2 -- "$build/bench/multi_worker_bench" multi_worker "$model" "$steps" | ips)")
    private+=("$("$build/tools/dist-launch" --workers 2 -- "$build/bench/multi_worker_bench" multi_worker_private "$model" "$steps" | ips)")
    tcp+=("$("$build/tools/dist-launch" --workers 2 -- "$build/bench/multi_worker_bench" multi_worker_tcp "$model" "$steps" | ips)")
    inproc+=("$("$build/bench/multi_worker_bench" mirrored "$model" "$steps" | ips)")
    ddp+=("$(LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/bin/python3 bench/pytorch_ddp_cnn.py 3 $((steps / 3)) "$model" | ips)")
    echo "$model round $i: 2 workers x 1 ${mw[-1]} (private copies ${private[-1]}, over tcp ${tcp[-1]}), 1 worker x 2 ${inproc[-1]}, pytorch ddp ${ddp[-1]} images/s"
  done
  a=$(median "${mw[@]}") b=$(median "${inproc[@]}") c=$(median "${ddp[@]}") d=$(median "${private[@]}") e=$(median "${tcp[@]}")
  echo "$model median images/s: 2 workers x 1 = $a (private copies $d), 1 worker x 2 = $b, pytorch ddp = $c"
  echo "$model ratio one shared copy / private copies: $(echo "$a / $d" | bc -l | cut -c1-5)"
  echo "$model ratio shared memory / tcp: $(echo "$a / $e" | bc -l | cut -c1-5) (tcp: $e images/s)"
  echo "$model ratio multi_worker / ddp: $(echo "$a / $c" | bc -l | cut -c1-5); in-process / multi_worker: $(echo "$b / $a" | bc -l | cut -c1-5)"
done
