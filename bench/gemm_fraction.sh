#!/usr/bin/env bash
# The 784-4096-4096-10 MLP's training step on one host against this machine's matrix-product
# peak (issue 72; docs/benchmarks.md, "The MLP against the GEMM peak"): torch.mm 2048^3 on the
# same 2 cores (bench/gemm_peak.py), then MirroredStrategy (2 replicas x 1 thread in one
# process), MultiWorkerMirroredStrategy (2 workers x 1 replica, dist-launch) and PyTorch DDP (2
# gloo processes, tcmalloc preloaded, the same OpenBLAS kernels: bench/lib/openblas_core.py) on
# synthetic batches of 64 per replica with Adam, alternating, medians of REPEATS rounds. A step's
# arithmetic: 113,754,112 FLOP an image (forward 2 x 20,029,440 multiply-adds; backward the
# weights' gradients as many and the inputs' of the two upper layers 2 x 16,818,176), so
# GFLOP/s = images/s x 0.113754 and the fraction is that over the 2-thread peak. Then one
# Mirrored run of dist-train with --timeline says where the rest of the step goes
# (bench/lib/timeline_phases.py).
#
#   bench/gemm_fraction.sh [build-dir=build] [repeats=3] [steps=40]
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
steps=${3:-40}
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
flops_per_image=113754112
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ips() { sed -nE 's/.* ([0-9]+) images\/s.*/\1/p' | tail -1; }
ratio() { echo "scale=3; $1 / $2" | bc -l; }
lscpu | grep -E "Model name" || true

peak1=() peak2=() mirrored=() multi_worker=() ddp=()
for ((i = 0; i < repeats; i++)); do
  while read -r _ threads gflops name; do
    core=$name  # read's last call, at the end, empties its variables
    if ((threads == 1)); then peak1+=("$gflops"); else peak2+=("$gflops"); fi
  done < <(LD_PRELOAD=$tcmalloc /usr/bin/python3 bench/gemm_peak.py 10)
  mirrored+=("$("$build/bench/multi_worker_bench" mirrored mlp "$steps" | ips)")
  multi_worker+=("$("$build/tools/dist-launch" --workers 2 -- "$build/bench/multi_worker_bench" \
    multi_worker mlp "$steps" | ips)")
  ddp+=("$(LD_PRELOAD=$tcmalloc /usr/bin/python3 bench/pytorch_ddp_cnn.py 3 $((steps / 3)) mlp | ips)")
  echo "round $i: gemm 1 thread ${peak1[-1]} GFLOP/s, 2 threads ${peak2[-1]} ($core);" \
    "mirrored ${mirrored[-1]}, multi_worker ${multi_worker[-1]}, ddp ${ddp[-1]} images/s"
done
p1=$(median "${peak1[@]}") p2=$(median "${peak2[@]}")
echo "gemm peak (torch.mm 2048^3, OpenBLAS $core): 1 thread $p1 GFLOP/s, 2 threads $p2 GFLOP/s"
for name in mirrored multi_worker ddp; do
  declare -n runs=$name
  m=$(median "${runs[@]}")
  gflops=$(echo "scale=1; $m * $flops_per_image / 1000000000" | bc -l)
  echo "$name: $m images/s (rounds ${runs[*]}) = $gflops GFLOP/s = $(ratio "$gflops" "$p2") of the peak"
done
echo "mirrored / ddp $(ratio "$(median "${mirrored[@]}")" "$(median "${ddp[@]}")")," \
  "multi_worker / ddp $(ratio "$(median "${multi_worker[@]}")" "$(median "${ddp[@]}")")"

# Where a Mirrored step's time goes: dist-train on Fashion-MNIST, 2 replicas x 1 thread.
out=$(mktemp -d /tmp/gemm_fraction.XXXXXX)
"$build/tools/dist-train" --strategy mirrored --replicas 2 --threads 1 --model mlp \
  --global-batch 128 --train-examples $((128 * steps)) --test-examples 128 --epochs 1 \
  --no-progress --timeline "$out/mirrored.json" >"$out/mirrored.log" 2>&1
grep -o '"images_per_sec":[0-9.]*\|"openblas_core[a-z_]*":"[A-Za-z]*"' "$out/mirrored.log" | tr '\n' ' '
echo
python3 bench/lib/timeline_phases.py "$out/mirrored.json" 3
