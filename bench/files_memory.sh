#!/usr/bin/env bash
# Peak memory of dist-train over files does not grow with the data set (issue 56: 50x and 1x the
# data within 10% of each other). Fashion-MNIST as raw-pixel TFRecords (fashion_mnist_to_files
# --format raw, 8 shards), once as it is and once with the training set written 50 times over
# (--repeat 50: 3,000,000 examples, about 2.7 GB), each trained for the same number of steps
#   dist-train --strategy mirrored --replicas 2 --max-steps STEPS --test-examples 640
#              --no-progress --train-data 'tfrecord:DIR/tfrecord/train-*' --test-data ...
# so that only the data's size differs. Peak RSS is measured from outside, by /usr/bin/time -v
# ("Maximum resident set size"); the two run in turn (1x 50x 1x 50x ...), ROUNDS rounds; prints
# every run, the medians and 50x / 1x. The 50x files are deleted afterwards (KEEP=1 keeps them).
#
#   bench/files_memory.sh [build-dir=build] [rounds=2] [steps=600] [data-dir=/tmp/dist_files_memory]
#                         [repeat=50]
set -euo pipefail
build=${1:-build}
rounds=${2:-2}
steps=${3:-600}
data=${4:-/tmp/dist_files_memory}
repeat=${5:-50}

[[ -x /usr/bin/time ]] || { echo "installing time"; apt-get install -y time >/dev/null; }
if [[ -f $build/CMakeCache.txt ]]; then  # a build tree (not a copied binary): bring it up to date
  for target in dist-train fashion_mnist_to_files; do
    flock /tmp/dist-build.lock cmake --build "$build" --target "$target" -j2 >/dev/null
  done
fi
if [[ ! -d $data/1x/tfrecord ]]; then
  echo "writing Fashion-MNIST as raw TFRecords to $data/1x"
  "$build/examples/fashion_mnist_to_files" "$data/1x" --format raw >/dev/null
fi
one_kb=$(du -sk "$data/1x/tfrecord" | cut -f1)
if [[ ! -d $data/${repeat}x/tfrecord ]]; then
  need_kb=$((one_kb * (repeat + 2)))
  free_kb=$(df -Pk "$(dirname "$data")" | awk 'NR == 2 {print $4}')
  if ((free_kb < need_kb)); then
    echo "need about $((need_kb / 1024)) MiB free for ${repeat}x the data, $((free_kb / 1024)) MiB free" >&2
    exit 1
  fi
  echo "writing the training set ${repeat} times over to $data/${repeat}x"
  "$build/examples/fashion_mnist_to_files" "$data/${repeat}x" --format raw --repeat "$repeat" >/dev/null
fi
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "${data:?}/${repeat}x"; }
trap cleanup EXIT

peak_mib() {  # peak RSS in MiB of dist-train over the data in $1
  set -f
  /usr/bin/time -v "$build/tools/dist-train" --strategy mirrored --replicas 2 --max-steps "$steps" \
    --test-examples 640 --no-progress --train-data "tfrecord:$1/tfrecord/train-*" \
    --test-data "tfrecord:$1/tfrecord/test-*" 2>&1 >/dev/null |
    sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' | awk '{print int($1 / 1024)}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores; date: $(date -u +%F)"
echo "data: 1x $(du -sh "$data/1x/tfrecord" | cut -f1), ${repeat}x $(du -sh "$data/${repeat}x/tfrecord" | cut -f1);" \
     "dist-train --strategy mirrored --replicas 2 --max-steps $steps --test-examples 640"
small=() big=()
for ((i = 0; i < rounds; i++)); do
  small+=("$(peak_mib "$data/1x")")
  big+=("$(peak_mib "$data/${repeat}x")")
  echo "round $i: peak RSS 1x ${small[-1]} MiB, ${repeat}x ${big[-1]} MiB"
done
m1=$(median "${small[@]}") mb=$(median "${big[@]}")
echo "median peak RSS: 1x $m1 MiB, ${repeat}x $mb MiB, ${repeat}x / 1x $(echo "$mb / $m1" | bc -l | cut -c1-5)"
