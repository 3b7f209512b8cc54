#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs. Idempotent: packages already present are
# left alone. Run as root (or with sudo).
#
#   scripts/install-deps.sh           what building and running the library and tools need
#   scripts/install-deps.sh --tests   that, and what the tests, benchmarks and examples need
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libtorch-dev          # tensors, autograd, layers, optimizers (CPU build, 1.13)
  libgloo-dev           # headers c10d's ProcessGroupGloo needs
  libopenblas0-openmp   # BLAS for LibTorch; the reference BLAS is ~10x slower
  libgoogle-perftools-dev  # tcmalloc, linked into every executable (cmake/DistAllocator.cmake)
  zlib1g-dev nlohmann-json3-dev libcli11-dev
  libpng-dev            # write_png and TensorBoard image summaries (dist/train/image_io.h)
  libjpeg62-turbo-dev   # JPEG decoding and encoding (dist/data/image_codec.h)
  libgrpc++-dev protobuf-compiler-grpc  # the parameter-server transport (src/ps)
  dataset-fashion-mnist # /usr/share/datasets/fashion-mnist
)
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  protobuf-compiler     # tests decode TensorBoard event files with protoc --decode_raw
  clang-14 libclang-rt-14-dev  # libFuzzer, ASan, UBSan for the "fuzz" tests (tests/fuzz)
  openmpi-bin           # the tests start workers with a real mpirun
  libopenmpi-dev        # the MPI collective backend, built and tested (src/collective/mpi)
  slurm-wlm munge       # the tests start a real single-node Slurm and run workers with srun
  procps                # pgrep and pkill in the Slurm helper of the tests
  iproute2              # ip and tc: the test cluster of network namespaces (scripts/netns-cluster.sh)
  etcd-server           # the etcd rendezvous's tests start real etcd clusters (tests/collective/etcd_cluster.h)
  etcd-client           # etcdctl: a write from inside a namespace host (tests/tools/netns_etcd_test.cc), users
  openssl               # the certificates of the etcd TLS tests
  python3               # the docs checks: layers and named paths (tests/docs/*.py)
  python3-torch python3-torchvision  # Python writes the TorchScript modules of the tests
)
with_tests=0
case ${1:-} in
  "") ;;
  --tests) with_tests=1 ;;
  *)
    echo "usage: $0 [--tests]" >&2
    exit 2
    ;;
esac

# Prints the packages of "$@" that are not installed.
missing_of() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}
mapfile -t missing < <(missing_of "${packages[@]}")
missing_tests=()
((with_tests)) && mapfile -t missing_tests < <(missing_of "${test_packages[@]}")

if ((${#missing[@]} + ${#missing_tests[@]} == 0)); then
  echo "install-deps: all packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]} ${missing_tests[*]}"
$SUDO apt-get update -q
# What building and running need, without recommended packages: they would add hundreds of
# megabytes (other BLAS builds, documentation) that nothing here uses, and the first run waits
# for them.
if ((${#missing[@]} > 0)); then
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The test tools as Debian installs them, recommended packages included (ssh for mpirun).
if ((${#missing_tests[@]} > 0)); then
  $SUDO apt-get install -y -q "${missing_tests[@]}"
fi
