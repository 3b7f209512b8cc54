#!/usr/bin/env bash
# dist-train's training images/s reading a user's files against the same run from the IDX files
# in memory (issue 56's targets: >= 0.8 from PNG or JPEG files, >= 0.95 from raw-pixel
# TFRecords). Fashion-MNIST as written by fashion_mnist_to_files:
#   idx       no --train-data (the IDX files, decoded once into memory)
#   png       --train-data 'tfrecord:DATA/png/tfrecord/train-*'   (8 shards of PNG Examples)
#   jpeg      --train-data 'tfrecord:DATA/jpeg/tfrecord/train-*'  (the same, JPEG quality 95)
#   raw       --train-data 'tfrecord:DATA/raw/tfrecord/train-*'   (--format raw: the pixels)
#   folder    --train-data images:DATA/png/images/train            (one PNG file an image)
# each: --strategy mirrored --replicas 2 --epochs EPOCHS --train-examples N --no-progress
# (the tutorial CNN, global batch 128, decoding threads and shuffle buffer at their defaults or
# as EXTRA says), the test data of the same kind cut to 640 examples. The figure is the JSON
# result's images_per_sec (training steps only; start-up and evaluation excluded). The five run
# in turn (A B C D E A B ...), ROUNDS rounds; prints every run, the medians, and per kind its
# ratio to idx: the median of the per-round ratios (each against that round's idx run); and the
# CPU seconds (user + sys) of the whole run, from /usr/bin/time, which a shared machine's load
# disturbs less than the wall-clock rate.
#
#   bench/files_vs_idx.sh [build-dir=build] [rounds=3] [data-dir=/tmp/dist_files_vs_idx]
#                         [train-examples=19200] [epochs=1] [kinds="idx png jpeg raw folder"]
#   EXTRA="--decode-threads 1" bench/files_vs_idx.sh ...     # extra dist-train flags, all runs
set -euo pipefail
[[ -x /usr/bin/time ]] || { echo "installing time"; apt-get install -y time >/dev/null; }
build=${1:-build}
rounds=${2:-3}
data=${3:-/tmp/dist_files_vs_idx}
examples=${4:-19200}
epochs=${5:-1}
read -r -a kinds <<<"${6:-idx png jpeg raw folder}"
read -r -a extra <<<"${EXTRA:-}"

if [[ -f $build/CMakeCache.txt ]]; then  # a build tree (not a copied binary): bring it up to date
  for target in dist-train fashion_mnist_to_files; do
    flock /tmp/dist-build.lock cmake --build "$build" --target "$target" -j2 >/dev/null
  done
fi
for format in png jpeg raw; do
  if [[ ! -d $data/$format/tfrecord ]]; then
    echo "writing Fashion-MNIST as $format to $data/$format"
    "$build/examples/fashion_mnist_to_files" "$data/$format" --format "$format" >/dev/null
  fi
done

spec() {  # the --train-data and --test-data flags of a kind
  case $1 in
    idx) ;;
    folder) echo "--train-data images:$data/png/images/train --test-data images:$data/png/images/test" ;;
    *) echo "--train-data tfrecord:$data/$1/tfrecord/train-* --test-data tfrecord:$data/$1/tfrecord/test-*" ;;
  esac
}
json_ips() { grep '"images_per_sec"' | tail -1 | sed -E 's/.*"images_per_sec":([0-9.eE+-]+).*/\1/' | cut -d. -f1; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores; flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|fma)$' | tr '\n' ' ')"
echo "date: $(date -u +%F); dist-train --strategy mirrored --replicas 2 --epochs $epochs" \
     "--train-examples $examples --test-examples 640 --no-progress ${extra[*]}"
declare -A runs ratios cpus
for ((i = 0; i < rounds; i++)); do
  line="round $i:"
  for kind in "${kinds[@]}"; do
    # shellcheck disable=SC2046  # spec's words are flags; the globs are dist-train's to match
    out=$(set -f; /usr/bin/time -f "cpu_seconds %U %S" "$build/tools/dist-train" --strategy mirrored \
            --replicas 2 --epochs "$epochs" --train-examples "$examples" --test-examples 640 \
            --no-progress "${extra[@]}" $(spec "$kind") 2>&1)
    ips=$(json_ips <<<"$out")
    cpu=$(sed -nE 's/^cpu_seconds ([0-9.]+) ([0-9.]+)$/\1 + \2/p' <<<"$out" | bc -l)
    runs[$kind]+="$ips "
    cpus[$kind]+="$cpu "
    [[ $kind == idx ]] && idx=$ips
    [[ -n ${idx:-} ]] && ratios[$kind]+="$(echo "$ips / $idx" | bc -l) "
    line+=" $kind $ips (${cpu} cpu s)"
  done
  echo "$line images/s"
done
for kind in "${kinds[@]}"; do
  # shellcheck disable=SC2086
  m=$(median ${runs[$kind]})
  if [[ -n ${ratios[$kind]:-} ]]; then
    # shellcheck disable=SC2086
    r=$(median ${ratios[$kind]} | cut -c1-5)
    echo "$kind: median $m images/s, / idx $r; median CPU $(median ${cpus[$kind]}) s (user + sys, whole run)"
  else
    echo "$kind: median $m images/s; median CPU $(median ${cpus[$kind]}) s (user + sys, whole run)"
  fi
done
