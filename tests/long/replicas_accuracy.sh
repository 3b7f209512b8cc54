#!/usr/bin/env bash
# Long test (ctest label "long"): 10 epochs of dist-train under MirroredStrategy with 1 and 2
# replicas (64 examples per replica); the test accuracies must agree within 0.5 points.
#   tests/long/replicas_accuracy.sh path/to/dist-train
set -euo pipefail
train=$1
acc() {
  "$train" --strategy mirrored --replicas "$1" --epochs 10 --no-progress | tail -1 |
    sed -E 's/.*"test_accuracy":([0-9.]+).*/\1/'
}
a1=$(acc 1)
a2=$(acc 2)
echo "test accuracy: 1 replica $a1, 2 replicas $a2"
awk -v a="$a1" -v b="$a2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
  { echo "FAIL: accuracies differ by more than 0.5 points"; exit 1; }
