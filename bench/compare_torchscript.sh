#!/usr/bin/env bash
# Speed of TorchScript modules from Python trained in C++ (issue 57), alternating runs
# (A B A B ...) so that both sides see the same machine load; prints every run, the medians and
# their ratio, with the CPU.
#
#  (a) torchvision's ResNet-18 (1 channel, 10 classes) scripted, trained by
#      examples/torchscript_mirrored (MirroredStrategy, 2 replicas x 1 thread), against the same
#      module trained eagerly by PyTorch DDP (2 gloo processes x 1 thread,
#      bench/torchscript_ddp_resnet18.py): the same initial weights, Fashion-MNIST shuffled, 64
#      images per replica, Adam 1e-3, tcmalloc on both sides (linked by ours, preloaded for
#      Python). The issue asks at least 1.2x. Beside them, the compute ceiling: the same eager
#      steps in 2 processes with no gradient sum at all (torchscript_ddp_resnet18.py's MODE
#      alone); each framework's images/s as a fraction of it tells how much of the step the
#      framework still loses, and ceiling / DDP is the highest ratio any framework could reach
#      against DDP on this machine with these kernels.
#  (b) the scripted twin of the tutorial CNN (tutorial_cnn.pt) against the same CNN written in
#      C++ (cpp:tutorial_cnn), both in examples/torchscript_mirrored's loop under the same
#      strategy. The twin makes its input channels-last as the C++ model does (in NCHW it ran
#      at 0.79 of the C++ model). The issue asks within 5%.
#
# Each run reports the images/s of its steps after 10 warm-up steps (start-up, loading and
# evaluation are not timed).
#
#   bench/compare_torchscript.sh [build-dir=build] [rounds=5] [resnet-steps=60] [cnn-steps=300]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
resnet_steps=${3:-60}
cnn_steps=${4:-300}
source "$(dirname "$0")/alternating.sh"  # median
example=$build/examples/torchscript_mirrored
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
/usr/bin/python3 examples/python/make_torchscript_models.py "$models"

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores; flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|fma)$' | tr '\n' ' ')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

ips() { sed -nE 's/.*: ([0-9.]+) images\/s.*/\1/p'; }
ours() {  # MODEL STEPS
  "$example" "$1" "$models/out" "$2" 1000 | ips
}
peer() {  # MODE: ddp or alone
  LD_PRELOAD=$tcmalloc /usr/bin/python3 bench/torchscript_ddp_resnet18.py "$resnet_steps" 64 "$1" | ips
}
ratio() { echo "$1 / $2" | bc -l | cut -c1-5; }

a=() b=() e=()
for ((i = 0; i < rounds; i++)); do
  a+=("$(ours "$models/resnet18.pt" "$resnet_steps")")
  b+=("$(peer ddp)")
  e+=("$(peer alone)")
done
ma=$(median "${a[@]}") mb=$(median "${b[@]}") me=$(median "${e[@]}")
echo "(a) resnet18, $resnet_steps steps of 128 images: mirrored x2 scripted ${a[*]} | pytorch ddp 2x1 eager ${b[*]} | ceiling (2 eager processes, no gradient sum) ${e[*]}"
echo "    medians $ma vs $mb images/s: mirrored / ddp $(ratio "$ma" "$mb")"
echo "    of the ceiling's $me: mirrored $(ratio "$ma" "$me"), ddp $(ratio "$mb" "$me"); the most any framework could reach against ddp here: $(ratio "$me" "$mb")x"

c=() s=()
for ((i = 0; i < rounds; i++)); do
  c+=("$(ours cpp:tutorial_cnn "$cnn_steps")")
  s+=("$(ours "$models/tutorial_cnn.pt" "$cnn_steps")")
done
mc=$(median "${c[@]}") ms=$(median "${s[@]}")
echo "(b) tutorial cnn, $cnn_steps steps of 128 images, mirrored x2: c++ ${c[*]} | scripted ${s[*]}"
echo "    medians c++ $mc, scripted $ms images/s: scripted / c++ $(ratio "$ms" "$mc")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
