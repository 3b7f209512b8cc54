#!/usr/bin/env bash
# What --timeline costs (issue 58: at most 2%): dist-train without and with a timeline,
# alternating off on off on ... so both see the same machine load. The tutorial CNN (its steps
# are short, so a span's cost weighs most) under MirroredStrategy x2 and on 2 workers under
# dist-launch (one host: shared memory between them), the custom loop and fit. Prints each
# run's images/s (the JSON line's images_per_sec: training steps only), the medians and
# on / off. The MLP across 2 namespace hosts at 1 Gbit/s: bench/hosts_scaling.sh with
# HS_BACKENDS="gloo gloo+timeline".
#   bench/timeline_overhead.sh [build=build] [rounds=7] [examples=6400]
set -euo pipefail
source "$(dirname "$0")/alternating.sh"
build=$(cd "${1:-build}" && pwd)
rounds=${2:-7}
examples=${3:-6400}
traces=$(mktemp -d /tmp/timeline_overhead.XXXXXX)
trap 'rm -rf "$traces"' EXIT
common="--epochs 1 --train-examples $examples --no-progress --seed 3"
ips() { tail -1 | sed -nE 's/.*"images_per_sec":([0-9.]+).*/\1/p' | cut -d. -f1; }

measure() {  # measure off|on NAME
  local timeline=()
  [[ $1 == on ]] && timeline=(--timeline "$traces/trace.json")
  export DIST_STORE_HOST=$build/tools/dist-store-host
  case $2 in
    custom_mirrored2)
      "$build/tools/dist-train" --strategy mirrored --replicas 2 $common "${timeline[@]}" | ips ;;
    fit_mirrored2)
      "$build/tools/dist-train" --strategy mirrored --replicas 2 --loop fit $common \
        "${timeline[@]}" | ips ;;
    custom_2_workers)
      "$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" \
        --strategy multi_worker $common "${timeline[@]}" |
        grep -E '^\[worker:0\]' | sed -E 's/^\[worker:0\] //' | ips ;;
  esac
}

compare_alternating off on "$rounds" custom_mirrored2 fit_mirrored2 custom_2_workers
echo "(before = off, after = on: --timeline; spans in the last run's file of worker 0:" \
  "$(grep -o '"ph":"X"' "$traces"/trace.worker-0.json 2>/dev/null | wc -l))"
