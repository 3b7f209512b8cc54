#!/usr/bin/env bash
# Installs every Debian package the project needs to build, test and run.
# Idempotent: packages already present are left alone. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libtorch-dev          # tensors, autograd, layers, optimizers (CPU build, 1.13)
  libgloo-dev           # headers c10d's ProcessGroupGloo needs
  libopenblas0-openmp   # BLAS for LibTorch; the reference BLAS is ~10x slower
  libgoogle-perftools-dev  # tcmalloc, linked into every executable (cmake/DistAllocator.cmake)
  zlib1g-dev nlohmann-json3-dev libcli11-dev
  libpng-dev            # write_png and TensorBoard image summaries (dist/train/image_io.h)
  libgtest-dev libgmock-dev libbenchmark-dev
  protobuf-compiler     # tests decode TensorBoard event files with protoc --decode_raw
  libgrpc++-dev protobuf-compiler-grpc  # the parameter-server transport (src/ps)
  dataset-fashion-mnist # /usr/share/datasets/fashion-mnist
  clang-14 libclang-rt-14-dev  # libFuzzer, ASan, UBSan for the "fuzz" tests (tests/fuzz)
  openmpi-bin           # the tests start workers with a real mpirun
  slurm-wlm munge       # the tests start a real single-node Slurm and run workers with srun
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q "${missing[@]}"
