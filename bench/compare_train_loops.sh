#!/usr/bin/env bash
# dist-train's two loops in two builds, alternating A B A B ... so both see the same machine
# load: the custom loop and fit under MirroredStrategy x2, and the custom loop on 2 workers
# under dist-launch (gradients overlapped with backward). Prints each run's images/s (the JSON
# line's images_per_sec: training steps only), the medians and after / before.
# A directory holds tools/ as a build tree does.
#   bench/compare_train_loops.sh BEFORE_DIR AFTER_DIR [rounds=5] [examples=6400]
set -euo pipefail
source "$(dirname "$0")/alternating.sh"
before=$1
after=$2
rounds=${3:-5}
examples=${4:-6400}
common="--epochs 1 --train-examples $examples --no-progress --seed 3"
ips() { tail -1 | sed -nE 's/.*"images_per_sec":([0-9.]+).*/\1/p' | cut -d. -f1; }

measure() {  # measure DIR NAME
  local dir=$1 name=$2
  export DIST_STORE_HOST=$dir/tools/dist-store-host
  case $name in
    custom_mirrored2) "$dir/tools/dist-train" --strategy mirrored --replicas 2 $common | ips ;;
    fit_mirrored2) "$dir/tools/dist-train" --strategy mirrored --replicas 2 --loop fit $common | ips ;;
    custom_2_workers)
      "$dir/tools/dist-launch" --workers 2 -- "$dir/tools/dist-train" --strategy multi_worker \
        $common | grep -E '^\[worker:0\]' | sed -E 's/^\[worker:0\] //' | ips ;;
  esac
}

compare_alternating "$before" "$after" "$rounds" custom_mirrored2 fit_mirrored2 custom_2_workers
