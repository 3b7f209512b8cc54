#!/usr/bin/env bash
# The decode pipeline alone (no training), Fashion-MNIST as 28x28 JPEGs written by
# fashion_mnist_to_files --format jpeg:
#   ours, image folder:  image_folder_files -> decode to grey uint8 -> scale to float [0, 1]
#                        -> batch 64, 2 decoding threads (MapOptions num_parallel_calls 2)
#   ours, TFRecords:     tfrecord_dataset over the 8 train shards -> parse the Example -> the same
#   PyTorch:             DataLoader(ImageFolder(transform=Grayscale + ToTensor), batch 64,
#                        num_workers 2), tcmalloc preloaded, on the same folder
# in turn (A B C A B C ...), so all see the same machine load; prints every round, the medians,
# ours / PyTorch, and each as a fraction of the machine's limit: libjpeg-turbo's decode rate for
# these images on one core (decode_image on one thread over the files already in memory) times
# the cores.
#   bench/input_pipeline.sh [build-dir=build] [rounds=5] [data-dir=/tmp/dist_input_pipeline]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
data=${3:-/tmp/dist_input_pipeline}
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4

need=()
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || need+=(python3-torch python3-torchvision)
[[ -e $tcmalloc ]] || need+=(libgoogle-perftools4)
if ((${#need[@]})); then
  echo "installing ${need[*]}"
  apt-get install -y "${need[@]}" >/dev/null
fi
for target in input_pipeline_bench fashion_mnist_to_files; do
  flock /tmp/dist-build.lock cmake --build "$build" --target "$target" -j2 >/dev/null
done
if [[ ! -d $data/images/train || ! -d $data/tfrecord ]]; then
  echo "writing Fashion-MNIST as JPEGs to $data"
  "$build/examples/fashion_mnist_to_files" "$data" --format jpeg >/dev/null
fi

bench=$build/bench/input_pipeline_bench
rate() { sed -nE 's/.*: ([0-9]+) images\/s.*/\1/p'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { echo "$1 / $2" | bc -l | cut -c1-5; }

cores=$(nproc)
echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $cores cores; flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|fma)$' | tr '\n' ' ')"
echo "date: $(date -u +%F); data: $data ($(find "$data/images/train" -type f | wc -l) training JPEGs)"
folder=() records=() torch=() one=()
for ((i = 0; i < rounds; i++)); do
  folder+=("$("$bench" images "$data/images/train" --threads 2 --batch 64 | rate)")
  records+=("$("$bench" tfrecord "$data/tfrecord/train-*" --threads 2 --batch 64 | rate)")
  torch+=("$(LD_PRELOAD=$tcmalloc /usr/bin/python3 "$(dirname "$0")/pytorch_image_folder.py" \
               "$data/images/train" --workers 2 --batch 64 | rate)")
  one+=("$("$bench" decode1 "$data/images/train" | rate)")
  echo "round $i: ours folder ${folder[-1]}, ours tfrecord ${records[-1]}, pytorch ${torch[-1]}," \
       "one-core decode ${one[-1]} images/s"
done
m_folder=$(median "${folder[@]}") m_records=$(median "${records[@]}")
m_torch=$(median "${torch[@]}") m_one=$(median "${one[@]}")
limit=$((m_one * cores))
echo "median images/s: ours folder $m_folder, ours tfrecord $m_records, pytorch $m_torch"
echo "ours / pytorch: folder $(ratio "$m_folder" "$m_torch"), tfrecord $(ratio "$m_records" "$m_torch")"
echo "machine limit: $m_one images/s on one core x $cores cores = $limit images/s"
echo "fraction of the limit: ours folder $(ratio "$m_folder" "$limit")," \
     "ours tfrecord $(ratio "$m_records" "$limit"), pytorch $(ratio "$m_torch" "$limit")"
