#!/usr/bin/env bash
# A longer CycleGAN run (examples/cyclegan.cc, sneakers <-> ankle boots from Fashion-MNIST) that
# shows whether it learns: after every epoch, the test set's cycle-consistency errors
# (MAE(X, F(G(X))), MAE(Y, G(F(Y)))), identity errors and the epoch's mean training losses, as
# one Markdown table. The pictures are in OUT/images/epoch_NNN.png, TensorBoard logs in OUT/logs.
#
#   bench/cyclegan_long_run.sh BUILD_DIR [EPOCHS=10] [STEPS_PER_EPOCH=all] [OUT=/tmp/cyclegan_long]
#                              [STRATEGY=mirrored]
#
# A finished run is not repeated: the example resumes from OUT/ckpts, so delete OUT to start over.
set -euo pipefail
build=${1:?usage: cyclegan_long_run.sh BUILD_DIR [EPOCHS] [STEPS_PER_EPOCH] [OUT] [STRATEGY]}
epochs=${2:-10}
steps=${3:-all}
out=${4:-/tmp/cyclegan_long}
strategy=${5:-mirrored}
lscpu | grep -E "^Model name" | sed 's/^/# /'
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# strategy $strategy, $epochs epochs, steps per epoch: $steps, out: $out"

args=(--strategy "$strategy" --epochs "$epochs" --out "$out" --no-progress --test-batches 16)
[[ $steps != all ]] && args+=(--steps-per-epoch "$steps")
log=$out.log
mkdir -p "$(dirname "$out")"
"$build/examples/cyclegan" "${args[@]}" | tee "$log" >&2

# The example prints, per epoch: "Epoch E/N", the mean losses, the test errors, "Elapse: S".
awk '
  /^Epoch / { split($2, e, "/"); epoch = e[1] }
  /loss_G\/total/ {
    for (i = 1; i <= NF; i++) if ($i ~ /:$/) { key = $i; sub(/:$/, "", key); loss[key] = $(i + 1) }
  }
  /^MAE\(X, F\(G\(X\)\)\)/ { cycle_x = $3; identity_x = $6 }
  /^MAE\(Y, G\(F\(Y\)\)\)/ { cycle_y = $3; identity_y = $6 }
  /^Elapse:/ {
    if (!header++) {
      print "| epoch | MAE(X, F(G(X))) | MAE(Y, G(F(Y))) | MAE(X, F(X)) | MAE(Y, G(Y)) |" \
            " loss_G/total | loss_F/total | loss_X | loss_Y | seconds |"
      print "|---|---|---|---|---|---|---|---|---|---|"
    }
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", epoch, cycle_x, cycle_y,
           identity_x, identity_y, loss["loss_G/total"], loss["loss_F/total"], loss["loss_X/loss"],
           loss["loss_Y/loss"], $2
  }' "$log"
echo "# pictures: $out/images/ (rows: X, G(X), F(G(X)), then Y, F(Y), G(F(Y)))"
