#!/usr/bin/env bash
# MirroredStrategy 2 replicas x 1 thread against PyTorch DDP 2 gloo processes x 1 thread, on
# the tutorial CNN with 64 examples per replica (PyTorch with tcmalloc preloaded, as its CPU
# tuning guide advises), alternating the two (A B A B ...) so both
# see the same machine load; prints the median images/s of each and the ratio.
#   bench/compare_mirrored_ddp.sh [build-dir] [repeats=5]
set -euo pipefail
build=${1:-build}
repeats=${2:-5}
ours=() theirs=()
for ((i = 0; i < repeats; i++)); do
  ours+=("$("$build/bench/mirrored_scaling_bench" 5 30 2x1 | sed -nE 's/.* ([0-9]+) images\/s.*/\1/p')")
  theirs+=("$(LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/bin/python3 bench/pytorch_ddp_cnn.py 5 30 cnn | sed -nE 's/.*: ([0-9]+) images\/s/\1/p')")
  echo "round $i: mirrored ${ours[-1]} images/s, pytorch ddp ${theirs[-1]} images/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
m_ours=$(median "${ours[@]}")
m_theirs=$(median "${theirs[@]}")
echo "median: mirrored $m_ours images/s, pytorch ddp $m_theirs images/s"
echo "ratio mirrored / ddp: $(echo "$m_ours / $m_theirs" | bc -l | cut -c1-5)"
