#!/usr/bin/env bash
# Every ratio issue 13 ("Speed out of the box") asks for, in one run, variants alternating
# (A B A B ...) so that a shared machine slows them alike; medians of ROUNDS runs each.
# PyTorch runs as its CPU tuning guide advises: tcmalloc preloaded.
#
#   bench/speed_out_of_the_box.sh BUILD_DIR [ROUNDS=3] [STEPS=30]
#
# Needs python3-torch (Debian's, the same engine as libtorch-dev) for the PyTorch peers.
set -euo pipefail
build=${1:?usage: speed_out_of_the_box.sh BUILD_DIR [ROUNDS] [STEPS]}
rounds=${2:-3}
steps=${3:-30}
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[[ -e $tcmalloc ]] || { echo "needs $tcmalloc (apt-get install libtcmalloc-minimal4)" >&2; exit 2; }
lscpu | grep -E "^Model name" | sed 's/^/# /'
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# $(nproc) cores; dist-train links: $(ldd "$build/tools/dist-train" | grep -o -E 'lib(tcmalloc|jemalloc|mimalloc)[^ ]*' | head -1)"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
last_ips() { sed -nE 's/.* ([0-9]+) images\/s.*/\1/p' | tail -1; }
json_ips() { grep '"images_per_sec"' | tail -1 | sed -E 's/.*"images_per_sec":([0-9.eE+-]+).*/\1/'; }
pytorch() { LD_PRELOAD=$tcmalloc /usr/bin/python3 bench/pytorch_ddp_cnn.py 3 "$steps" "$@" | last_ips; }
ours() { "$build/bench/mirrored_scaling_bench" 3 "$steps" "$@" | last_ips; }
report() {  # report LABEL A_NAME "A samples" B_NAME "B samples": medians and A / B
  local a b
  a=$(median $3) b=$(median $5)
  printf '%-46s %s %6.0f, %s %6.0f: ratio %s  (runs: %s| %s)\n' "$1" "$2" "$a" "$4" "$b" \
    "$(ratio "$a" "$b")" "$3" "$5"
}

for model in cnn mlp; do
  # 1. The allocator is built in: dist-train as built against itself with tcmalloc preloaded.
  built="" preloaded=""
  for ((r = 0; r < rounds; r++)); do
    args=(--strategy mirrored --model "$model" --global-batch 128 --max-steps 40 --epochs 1
          --no-progress --train-examples 60000)
    built+="$("$build/tools/dist-train" "${args[@]}" | json_ips) "
    preloaded+="$(LD_PRELOAD=$tcmalloc "$build/tools/dist-train" "${args[@]}" | json_ips) "
  done
  report "$model: dist-train as built / tcmalloc preloaded" built "$built" preloaded "$preloaded"

  # 2. Mirrored 2 replicas x 1 thread against PyTorch DDP 2 processes x 1 thread.
  mirrored="" ddp=""
  for ((r = 0; r < rounds; r++)); do
    mirrored+="$(ours 2x1 "$model") "
    ddp+="$(pytorch "$model" 2 1) "
  done
  report "$model: Mirrored 2x1 / PyTorch DDP 2x1" mirrored "$mirrored" ddp "$ddp"
  if [[ $model == cnn ]]; then
    # Our CNN runs channels-last by itself; PyTorch's tuning guide asks users to opt in.
    ddp_cl=""
    for ((r = 0; r < rounds; r++)); do ddp_cl+="$(pytorch cnn-channels-last 2 1) "; done
    report "$model: Mirrored 2x1 / DDP channels-last" mirrored "$mirrored" ddp_cl "$ddp_cl"
  fi

  # 3. MultiWorkerMirrored 2 workers x 1 replica (dist-launch) against the same DDP.
  workers=""
  for ((r = 0; r < rounds; r++)); do
    workers+="$("$build/tools/dist-launch" --workers 2 -- "$build/bench/multi_worker_bench" \
                multi_worker "$model" "$steps" | last_ips) "
  done
  report "$model: MultiWorker 2 workers x 1 / PyTorch DDP" workers "$workers" ddp "$ddp"
  [[ $model == cnn ]] &&
    report "$model: MultiWorker 2x1 / DDP channels-last" workers "$workers" ddp_cl "$ddp_cl"

  # 4. One replica with 2 threads against PyTorch in one process with 2 threads, and against
  #    the same step written with LibTorch alone (in one process, interleaved).
  one="" plain="" ours_plain=""
  for ((r = 0; r < rounds; r++)); do
    one+="$(ours 1x2 "$model") "
    plain+="$(pytorch "$model" 1 2) "
    ours_plain+="$(ours plain1x2 "$model") "
  done
  report "$model: 1 replica x 2 threads / PyTorch 1x2" one "$one" pytorch "$plain"
  report "$model: 1 replica x 2 threads / LibTorch alone" one "$one" libtorch "$ours_plain"

  # 5. bfloat16 against float32 (1 replica x 2 threads and 2 replicas x 1 thread).
  for layout in 1x2 2x1; do
    f32="" bf16=""
    for ((r = 0; r < rounds; r++)); do
      f32+="$(ours "$layout" "$model" float32) "
      bf16+="$(ours "$layout" "$model" bf16) "
    done
    report "$model: $layout bf16 / float32" bf16 "$bf16" float32 "$f32"
  done
done

# 6. fit against the custom loop it is bit-identical to (one epoch of 12000 examples).
custom="" fit=""
for ((r = 0; r < rounds; r++)); do
  for loop in custom fit; do
    ips=$("$build/tools/dist-train" --loop "$loop" --epochs 1 --train-examples 12000 --no-progress | json_ips)
    [[ $loop == custom ]] && custom+="$ips " || fit+="$ips "
  done
done
report "cnn: --loop fit / --loop custom" fit "$fit" custom "$custom"

# 7. The progress display under 2 worker processes (dist-launch): on (the default) / off.
on="" off=""
for ((r = 0; r < rounds; r++)); do
  args=(--strategy multi_worker --epochs 1 --train-examples 12000)
  on+="$("$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" "${args[@]}" | json_ips) "
  off+="$("$build/tools/dist-launch" --workers 2 -- "$build/tools/dist-train" "${args[@]}" --no-progress | json_ips) "
done
report "cnn: 2 workers, progress display on / off" on "$on" off "$off"
