#!/usr/bin/env bash
# One dist-train command line under two builds, alternating A B A B ... so both see the same
# machine load; prints each round's images/s (the JSON result's images_per_sec), the medians
# and after / before. A directory holds tools/ as a build tree does.
#   bench/compare_dist_train.sh BEFORE_DIR AFTER_DIR ROUNDS DIST_TRAIN_ARGS...
# e.g. bench/compare_dist_train.sh /tmp/old/build build 5 --strategy one_device --model mlp \
#        --train-examples 4096 --test-examples 512 --epochs 1
set -euo pipefail
if (($# < 3)); then
  sed -n '2,7p' "$0" >&2
  exit 2
fi
before=$1 after=$2 rounds=$3
shift 3
images_per_sec() {  # images_per_sec DIR ARGS...: one run's images/s
  local dir=$1
  shift
  "$dir/tools/dist-train" --no-progress "$@" | tail -1 |
    python3 -c 'import json, sys; print(round(json.loads(sys.stdin.read())["images_per_sec"], 1))'
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
a=() b=()
for ((r = 1; r <= rounds; r++)); do
  # Alternate which build goes first, so neither always follows the other.
  if ((r % 2)); then
    a+=("$(images_per_sec "$before" "$@")")
    b+=("$(images_per_sec "$after" "$@")")
  else
    b+=("$(images_per_sec "$after" "$@")")
    a+=("$(images_per_sec "$before" "$@")")
  fi
  echo "round $r: before ${a[-1]}, after ${b[-1]} images/s"
done
ma=$(printf '%s\n' "${a[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
echo "medians: before $ma, after $mb images/s; after / before $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}')"
