#!/usr/bin/env bash
# Times the dense-layer benchmark with OpenBLAS (the default after install-deps.sh) and with
# Debian's reference BLAS (loaded in its place via LD_LIBRARY_PATH), and prints the ratio.
#   bench/run_blas_comparison.sh [build-dir]
set -euo pipefail
build=${1:-build}
bin="$build/bench/dense_layer_bench"
ref_dir=/usr/lib/x86_64-linux-gnu/blas
[[ -x $bin ]] || { echo "build $bin first (cmake --build $build)"; exit 2; }
[[ -e $ref_dir/libblas.so.3 ]] || { echo "reference BLAS not found in $ref_dir (apt-get install libblas3)"; exit 2; }
open_ms=$("$bin" | sed -E 's/.*: ([0-9.]+) ms.*/\1/')
ref_ms=$(LD_LIBRARY_PATH=$ref_dir "$bin" 3 1 | sed -E 's/.*: ([0-9.]+) ms.*/\1/')
echo "openblas:       $open_ms ms"
echo "reference BLAS: $ref_ms ms"
echo "reference/openblas: $(echo "$ref_ms / $open_ms" | bc -l | cut -c1-5)x"
