#!/usr/bin/env bash
# Two builds of this project, benchmark by benchmark, alternating A B A B ... so both see the
# same machine load: MirroredStrategy 1x1, 1x2 and 2x1 on the CNN (images/s), the one-device
# step (ms, OneDeviceStrategy), and 2 workers x 1 replica under dist-launch on the CNN and
# the MLP with and without overlap (images/s). Prints each median and after / before.
# A directory holds tools/ and bench/ as a build tree does.
#   bench/compare_builds.sh BEFORE_DIR AFTER_DIR [rounds=5] [steps=30]
set -euo pipefail
source "$(dirname "$0")/alternating.sh"
before=$1
after=$2
rounds=${3:-5}
steps=${4:-30}
ips() { sed -nE 's/.* ([0-9]+) images\/s.*/\1/p' | tail -1; }
ms() { sed -nE 's/^OneDeviceStrategy step: +([0-9.]+) ms.*/\1/p'; }

measure() {  # measure DIR NAME
  local dir=$1 name=$2
  export DIST_STORE_HOST=$dir/tools/dist-store-host
  case $name in
    mirrored_1x1 | mirrored_1x2 | mirrored_2x1)
      "$dir/bench/mirrored_scaling_bench" 3 "$steps" "${name#mirrored_}" | ips ;;
    one_device_ms) "$dir/bench/strategy_overhead_bench" 5 "$steps" | ms ;;
    mw_cnn) "$dir/tools/dist-launch" --workers 2 -- "$dir/bench/multi_worker_bench" multi_worker cnn "$steps" | ips ;;
    mw_cnn_no_overlap) "$dir/tools/dist-launch" --workers 2 -- "$dir/bench/multi_worker_bench" multi_worker_after_backward cnn "$steps" | ips ;;
    mw_mlp) "$dir/tools/dist-launch" --workers 2 -- "$dir/bench/multi_worker_bench" multi_worker mlp 10 | ips ;;
  esac
}

compare_alternating "$before" "$after" "$rounds" mirrored_1x1 mirrored_1x2 mirrored_2x1 one_device_ms mw_cnn mw_cnn_no_overlap mw_mlp
