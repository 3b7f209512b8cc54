#!/usr/bin/env bash
# dist-train's two loops on the same job: the custom loop against keras::Model::fit (they take
# bit-identical steps, so any difference is fit's per-step bookkeeping). Alternating runs;
# prints each run's training images/s and the medians and their ratio.
#
#   bench/compare_fit_custom.sh BUILD_DIR [RUNS=5] [TRAIN_EXAMPLES=30000]
set -euo pipefail
build=${1:?usage: compare_fit_custom.sh BUILD_DIR [RUNS] [TRAIN_EXAMPLES]}
runs=${2:-5}
examples=${3:-30000}
train="$build/tools/dist-train"
[[ -x "$train" ]] || { echo "no $train: build first" >&2; exit 2; }
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((i = 1; i <= runs; i++)); do
  for loop in custom fit; do
    rate=$("$train" --loop "$loop" --epochs 1 --train-examples "$examples" --no-progress |
           tail -1 | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["images_per_sec"]))')
    echo "$loop $rate" | tee -a "$results"
  done
done
/usr/bin/python3 - "$results" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    loop, rate = line.split()
    rates.setdefault(loop, []).append(float(rate))
custom, fit = statistics.median(rates["custom"]), statistics.median(rates["fit"])
print(f"median images/s: custom {custom:.0f}, fit {fit:.0f}; fit / custom = {fit / custom:.3f}")
PY
