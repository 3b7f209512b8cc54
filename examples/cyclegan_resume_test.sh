#!/usr/bin/env bash
# The CycleGAN example, killed (SIGKILL) in the middle of training and started again with the
# same arguments, resumes at the step of its latest checkpoint and ends with all eight objects
# (four models, four optimizers) and the training state bit-identical to an uninterrupted run.
# It also checks the pictures: a PNG per epoch, whose IHDR gives the grid's size.
#
#   cyclegan_resume_test.sh CYCLEGAN_BINARY OUT_DIR [STRATEGY]
set -euo pipefail
bin=$1
out=$2
strategy=${3:-mirrored}
rm -rf "$out"
mkdir -p "$out"
args=(--strategy "$strategy" --epochs 3 --steps-per-epoch 2 --batch-per-replica 2
      --test-batches 1 --checkpoint-every 1 --filters 4 --no-progress)

"$bin" "${args[@]}" --out "$out/whole" > "$out/whole.log"

set +e
"$bin" "${args[@]}" --out "$out/resumed" --kill-at-step 3 > "$out/killed.log"
code=$?
set -e
if [ "$code" -ne 137 ]; then
  echo "expected the run to die of SIGKILL at step 3 (exit 137), got exit $code"
  cat "$out/killed.log"
  exit 1
fi
# Killed in epoch 2: only epoch 1's checkpoint exists.
[ -f "$out/resumed/ckpts/ckpt-2.safetensors" ] && [ ! -f "$out/resumed/ckpts/ckpt-4.safetensors" ] || {
  echo "expected only ckpt-2 after the kill:"; ls "$out/resumed/ckpts"; exit 1; }

"$bin" "${args[@]}" --out "$out/resumed" > "$out/resumed.log"
grep -q "resumed from .*ckpt-2.safetensors at step 2" "$out/resumed.log" || {
  echo "the restarted run did not resume at step 2:"; cat "$out/resumed.log"; exit 1; }

if ! cmp "$out/whole/ckpts/ckpt-6.safetensors" "$out/resumed/ckpts/ckpt-6.safetensors"; then
  echo "the resumed run ended with different objects than the uninterrupted one"
  exit 1
fi

# PNG: signature, then IHDR's width and height (big-endian) at bytes 16..23.
png="$out/whole/images/epoch_003.png"
[ "$(od -An -c -j1 -N3 "$png" | tr -d ' ')" = "PNG" ] || { echo "$png is not a PNG"; exit 1; }
read -r w3 w2 w1 w0 h3 h2 h1 h0 <<< "$(od -An -tu1 -j16 -N8 "$png")"
width=$(( (w3 << 24) | (w2 << 16) | (w1 << 8) | w0 ))
height=$(( (h3 << 24) | (h2 << 16) | (h1 << 8) | h0 ))
# Two grids of 3 rows x 5 columns of 32x32 tiles (2-pixel borders), one above the other.
if [ "$width" -ne 176 ] || [ "$height" -ne 214 ]; then
  echo "$png is ${width}x${height}, expected 176x214"
  exit 1
fi
echo "the resumed run equals the uninterrupted one; $png is ${width}x${height}"
