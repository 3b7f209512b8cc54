#!/usr/bin/env bash
# Test accuracy after EPOCHS epochs of the tutorial CNN on Fashion-MNIST with each gradient
# compression of dist-train (--gradient-compression): 2 workers of --strategy multi_worker over
# Gloo on this machine (dist-launch --workers 2; on one host they meet through shared memory, the
# compression is the same), 1 intra-op thread and 64 examples each (global batch 128), Adam 1e-3,
# the same seed for every run, so the compression is the only difference. Every compression must
# stay within 0.5 points of none (the issue's target): "yes" when it is at most 0.5 points below
# none (or above it), as bench/mixed_precision_accuracy.sh counts it. One run of each (10 epochs
# take minutes each); the images/s column is each run's training speed, on loopback and sharing
# the machine's cores, so it says nothing about a network (bench/hosts_scaling.sh does).
#
#   bench/compression_accuracy.sh [BUILD_DIR=build]
#
# Environment: CA_SEED (dist-train's --seed, default 42: weights and shuffling; every run is
# deterministic, so a second run of one seed repeats the first bit for bit, and only other seeds
# say how much two compressions differ by chance), CA_COMPRESSIONS (default "none bf16 fp16 powersgd:4"; each passed as
# --gradient-compression, none too), CA_EPOCHS (10), CA_OUT (a directory for each run's output,
# COMPRESSION.log; default a new one in /tmp). A run that fails is reported with the first error
# line of its output and the others still run; the exit code is then 1.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
compressions=${CA_COMPRESSIONS:-none bf16 fp16 powersgd:4}
epochs=${CA_EPOCHS:-10}
seed=${CA_SEED:-42}
out=${CA_OUT:-$(mktemp -d /tmp/compression_accuracy.XXXXXX)}
mkdir -p "$out"
data=/usr/share/datasets/fashion-mnist
lscpu | grep -E "^Model name" | sed 's/^/# /'
echo "# cnn, seed $seed, $epochs epochs, 2 workers x 1 thread on loopback, global batch 128; outputs in $out"
field() { sed -E "s/.*\"$1\":([0-9.eE+-]+).*/\1/"; }
# The first line of FILE that reads as an error (dist-train's or dist-launch's message, an
# exception, a flag parse error), else its last line.
first_error() {
  grep -m1 -E 'dist-(train|launch): |[A-Za-z]+(Error|Exception): |what\(\): |not expected|enforce fail' "$1" ||
    tail -1 "$1"
}

declare -A accuracy=() speed=()
failed=0
for compression in $compressions; do
  log=$out/${compression//[\/:]/_}.log
  start=$(date +%s)
  if "$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" --strategy multi_worker \
    --collective-backend gloo --model cnn --threads 1 --batch-per-replica 64 --epochs "$epochs" \
    --no-progress --data-dir "$data" --seed "$seed" --gradient-compression "$compression" \
    --compress-packs-from 0 \
    >"$log" 2>&1; then
    json=$(grep '"test_accuracy"' "$log" | tail -1 || true)
  else
    json=
  fi
  if [[ -z $json ]]; then
    echo "$compression: failed after $(($(date +%s) - start)) s: $(first_error "$log" | cut -c1-300)"
    failed=1
    continue
  fi
  accuracy[$compression]=$(field test_accuracy <<<"$json")
  speed[$compression]=$(field images_per_sec <<<"$json")
  printf '%s: test accuracy %.4f, %.0f images/s (%d s)\n' "$compression" \
    "${accuracy[$compression]}" "${speed[$compression]}" "$(($(date +%s) - start))"
done

echo
printf '%-16s %13s %16s %14s %9s\n' compression "test accuracy" "- none (points)" "within 0.5" images/s
for compression in $compressions; do
  if [[ -z ${accuracy[$compression]:-} ]]; then
    printf '%-16s %13s %16s %14s %9s\n' "$compression" failed - - -
    continue
  fi
  awk -v c="$compression" -v a="${accuracy[$compression]}" -v b="${accuracy[none]:-}" \
    -v s="${speed[$compression]}" 'BEGIN {
      if (b == "") { d = "-"; w = "- (no none)" }
      else if (c == "none") { d = "+0.00"; w = "-" }
      else { x = 100 * (a - b); d = sprintf("%+.2f", x); w = (x >= -0.5 ? "yes" : "NO (below)") }
      printf "%-16s %13.4f %16s %14s %9.0f\n", c, a, d, w, s }'
done
exit "$failed"
