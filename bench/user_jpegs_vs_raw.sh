#!/usr/bin/env bash
# dist-train from a user's mixed-size RGB JPEGs (decoded, random resized crop to 224, flip,
# normalize on the decoding threads) against the same run from images decoded and resized
# beforehand (raw-pixel TFRecords at 224x224, read from the page cache: only the flip and the
# normalization left to do), on torchvision's ResNet-18 scripted (issue 69's target: >= 0.9).
# bench/user_jpegs_data.py writes the data. Each run: --strategy mirrored (one replica per core)
# --global-batch 16 --epochs 1 --no-progress; the figure is the JSON result's images_per_sec
# (training steps only). The two kinds run in turn, ROUNDS rounds; prints every run, the
# medians and the median of the per-round ratios jpeg / raw.
#
#   bench/user_jpegs_vs_raw.sh [build-dir=build] [rounds=3] [data-dir=/tmp/dist_user_jpegs]
#                              [images-per-class=16]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
data=${3:-/tmp/dist_user_jpegs}
per_class=${4:-16}
python=/usr/bin/python3  # Debian's, with python3-torch and python3-torchvision

if [[ -f $build/CMakeCache.txt ]]; then
  flock /tmp/dist-build.lock cmake --build "$build" --target dist-train -j2 >/dev/null
fi
if [[ ! -f $data/resnet18.pt ]]; then
  echo "writing $((per_class * 10)) JPEGs, their raw TFRecords and the scripted ResNet-18 to $data"
  "$python" "$(dirname "$0")/user_jpegs_data.py" "$data" "$per_class"
fi

common=(--model-file "$data/resnet18.pt" --normalize imagenet --epochs 1 --global-batch 16
        --no-progress)
run() {
  local out
  if [[ $1 == jpeg ]]; then
    out=$("$build/tools/dist-train" "${common[@]}" --train-data "images:$data/jpeg/train" \
            --test-data "images:$data/jpeg/test" --image-size 224x224 --augment flip,crop 2>&1)
  else
    out=$(set -f; "$build/tools/dist-train" "${common[@]}" --train-data "tfrecord:$data/raw/train-*" \
            --test-data "tfrecord:$data/raw/test-*" --augment flip 2>&1)
  fi
  grep '"images_per_sec"' <<<"$out" | tail -1 | sed -E 's/.*"images_per_sec":([0-9.eE+-]+).*/\1/'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores; flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile|fma)$' | tr '\n' ' ')"
echo "date: $(date -u +%F); dist-train ${common[*]/$data/DATA}"
jpeg=() raw=() ratios=()
for ((i = 0; i < rounds; i++)); do
  j=$(run jpeg)
  r=$(run raw)
  jpeg+=("$j") raw+=("$r") ratios+=("$(echo "$j / $r" | bc -l)")
  echo "round $i: jpeg $j raw $r images/s"
done
echo "medians: jpeg $(median "${jpeg[@]}") raw $(median "${raw[@]}") images/s;" \
     "jpeg / raw $(median "${ratios[@]}" | cut -c1-5)"
