#!/usr/bin/env bash
# The 224x224 RGB JPEG training pipeline of issue 69 (item 6), no training, on ~500 mixed-size
# RGB JPEGs (300 to 500 pixels a side, 5 classes) written to a temporary folder:
#   ours:     image_folder_files -> decode_image RGB -> random_resized_crop(224) ->
#             random_flip_left_right -> normalize(ImageNet) -> batch 64, on `nproc` threads
#             (bench/jpeg_pipeline_bench.cc pipeline)
#   PyTorch:  DataLoader(ImageFolder(transform=RandomResizedCrop(224), RandomHorizontalFlip(),
#             ToTensor(), Normalize(ImageNet)), batch 64, num_workers = `nproc`), tcmalloc
#             preloaded (bench/pytorch_jpeg_pipeline.py)
#   ours, 1:  the same pipeline on one thread (--threads 1)
#   decode:   libjpeg-turbo's decode-only rate on one core over the same files in memory
#             (decode_image to RGB)
# in turn (A B C A B C ...), so all see the same machine load; 2 epochs a run; prints every
# round, the medians, images/s per core, ours / PyTorch (both on every core) and ours / decode-
# only (both on one thread: on a machine that others load, one thread against one thread is
# the fair per-core comparison), and where our time goes on one core (stages1).
#   bench/jpeg_pipeline.sh [build-dir=build] [rounds=5]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
here=$(dirname "$0")
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[[ -e $tcmalloc ]] || { echo "install libtcmalloc-minimal4 (tcmalloc for PyTorch)"; exit 1; }
flock /tmp/dist-build.lock cmake --build "$build" --target jpeg_pipeline_bench -j2 >/dev/null
data=$(mktemp -d /tmp/dist_jpeg_pipeline.XXXXXX)
trap 'rm -rf "$data"' EXIT
/usr/bin/python3 "$here/pytorch_jpeg_pipeline.py" make "$data" --images 500

bench=$build/bench/jpeg_pipeline_bench
rate() { sed -nE 's/.*: ([0-9]+) images\/s.*/\1/p'; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { echo "$1 / $2" | bc -l | cut -c1-5; }

cores=$(nproc)
echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $cores cores"
echo "date: $(date -u +%F); $(find "$data" -name '*.jpg' | wc -l) JPEGs, $(du -sh "$data" | cut -f1)"
ours=() torch=() one=() decode=()
for ((i = 0; i < rounds; i++)); do
  ours+=("$("$bench" pipeline "$data" --threads "$cores" --epochs 2 | rate)")
  torch+=("$(LD_PRELOAD=$tcmalloc /usr/bin/python3 "$here/pytorch_jpeg_pipeline.py" run "$data" \
               --workers "$cores" --epochs 2 | rate)")
  one+=("$("$bench" pipeline "$data" --threads 1 --epochs 2 | rate)")
  decode+=("$("$bench" decode1 "$data" --epochs 2 | rate)")
  echo "round $i: on $cores cores ours ${ours[-1]}, pytorch ${torch[-1]} images/s; on one" \
       "thread ours ${one[-1]}, decode-only ${decode[-1]} images/s"
done
m_ours=$(median "${ours[@]}") m_torch=$(median "${torch[@]}")
m_one=$(median "${one[@]}") m_decode=$(median "${decode[@]}")
echo "median images/s: on $cores cores ours $m_ours, pytorch $m_torch;" \
     "on one thread ours $m_one, decode-only $m_decode"
echo "per core: ours $((m_ours / cores)), pytorch $((m_torch / cores)) (on $cores cores);" \
     "ours $m_one, decode-only $m_decode (on one thread)"
echo "ours / pytorch: $(ratio "$m_ours" "$m_torch"); ours / decode-only (one thread):" \
     "$(ratio "$m_one" "$m_decode"); ours on $cores cores / (decode-only x $cores):" \
     "$(ratio "$m_ours" "$((m_decode * cores))")"
"$bench" stages1 "$data" --epochs 2
