#!/usr/bin/env bash
# Test accuracy after EPOCHS epochs of dist-train (MirroredStrategy, the default layout) with
# float32 and with bf16 compute (--mixed-precision bf16), and each run's training images/s:
# bf16 must stay within 0.5 points of float32 (issue 13). One run of each (10 epochs take
# minutes; the MLP's many more).
#
#   bench/mixed_precision_accuracy.sh BUILD_DIR [MODELS="cnn mlp"] [EPOCHS=10]
set -euo pipefail
build=${1:?usage: mixed_precision_accuracy.sh BUILD_DIR [MODELS] [EPOCHS]}
models=${2:-cnn mlp}
epochs=${3:-10}
lscpu | grep -E "^Model name" | sed 's/^/# /'
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
field() { sed -E "s/.*\"$1\":([0-9.eE+-]+).*/\1/"; }
for model in $models; do
  declare -A accuracy=() speed=()
  for precision in float32 bf16; do
    json=$("$build/tools/dist-train" --model "$model" --epochs "$epochs" --no-progress \
           --mixed-precision "$precision" | grep '"images_per_sec"' | tail -1)
    accuracy[$precision]=$(field test_accuracy <<<"$json")
    speed[$precision]=$(field images_per_sec <<<"$json")
    printf '%s %-8s test accuracy %.4f, %.0f images/s\n' "$model" "$precision" \
      "${accuracy[$precision]}" "${speed[$precision]}"
  done
  awk -v m="$model" -v a="${accuracy[bf16]}" -v b="${accuracy[float32]}" -v s="${speed[bf16]}" \
      -v t="${speed[float32]}" 'BEGIN {
        d = 100 * (a - b); printf "%s bf16 - float32: %+.2f points (%s), speed bf16 / float32 %.3f\n",
        m, d, (d > -0.5 ? "within 0.5" : "MORE than 0.5 below"), s / t }'
  unset accuracy speed
done
