#!/usr/bin/env bash
# Peak resident memory per worker under sharding (issue 35, docs/sharding.md): the
# 784-10240-10240-10 MLP (113M parameters, dist-train --model mlp_wide) with Adam on WORKERS
# workers (default 4) of one replica and one thread, each worker a "host" of its own (a network
# namespace of scripts/netns-cluster.sh, unlimited links), so that no two workers share memory
# and unsharded means every worker keeps everything, as across real hosts. dist-train
# --sharding none | optimizer | gradients | parameters, then PyTorch DDP with Adam and with
# ZeroRedundancyOptimizer (bench/pytorch_zero_memory.py under Debian's /usr/bin/python3 and
# python3-torch, tcmalloc preloaded), in one run,
# alternating, REPEATS rounds. Each figure is the largest VmHWM of the workers (dist-train's
# JSON peak_rss_bytes); the table gives medians and each level's ratio to its framework's
# unsharded run.
#
#   bench/sharding_memory.sh [build-dir=build] [repeats=1] [workers=4] [steps=3]
#                            [model=mlp_wide|mlp_deep]   (root)
#
# mlp_deep (104M parameters in 8 layers of at most 16.8M) is the model stage 3 is for: it holds
# one layer whole at a time, and mlp_wide's largest layer is 93% of the model.
#
# Environment: SM_OUT (a directory for raw outputs and results.tsv; default a new one in /tmp);
# SM_DECOMMIT (default true): TCMALLOC_AGGRESSIVE_DECOMMIT for both frameworks. tcmalloc keeps
# freed pages by default, so memory a level frees (stage 3 frees each layer after use) would
# still count as resident: measured on mlp_deep at stage 3, 1294 MiB kept, 975 MiB released.
# SM_LEVELS (default "none optimizer gradients parameters"): the dist-train levels to run
# (LEVEL:REUSE adds --sharding-reuse-bytes REUSE: parameters:0 is stage 3 keeping only the last
# layer whole for its backward, the default before 2026-11-30);
# SM_PYTORCH (default 1; 0 skips PyTorch); SM_CHECKPOINT (default 0; 1: every dist-train run
# also writes a checkpoint after each step, into a directory of $SM_OUT that every host sees:
# the memory a checkpoint costs at each level; "resume": the same, and then a second job
# resumes from the last checkpoint and trains STEPS more steps, whose peak is reported as
# "<level>+resume": the memory reading a checkpoint costs).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
repeats=${2:-1}
workers=${3:-4}
steps=${4:-3}
model=${5:-mlp_wide}
out=${SM_OUT:-$(mktemp -d /tmp/sharding_memory.XXXXXX)}
mkdir -p "$out"
netns=$here/scripts/netns-cluster.sh
cluster=shmem$$
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
export TCMALLOC_AGGRESSIVE_DECOMMIT=${SM_DECOMMIT:-true}
cleanup() { "$netns" down "$cluster" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$netns" up "$cluster" "$workers" >/dev/null
mapfile -t hosts < <("$netns" addresses "$cluster")
host_list=$(IFS=,; echo "${hosts[*]}")
global_batch=$((16 * workers))
# A new port base for each run: a job's store host may outlive it for a moment, and a job on
# its ports would then be refused by it (another job token).
port=7400

dist_train_job() {  # PORT LEVEL LOG MAX_STEPS [ARGS...] (a subshell: the caller moves the port)
  local port=$1 level=$2 log=$3 max_steps=$4 reuse=()
  shift 4
  # LEVEL:REUSE: stage 3 with --sharding-reuse-bytes REUSE (parameters:0, parameters:-1).
  [[ $level == *:* ]] && reuse=(--sharding-reuse-bytes "${level#*:}")
  timeout 1200 "$build/tools/dist-launch" --hosts "$host_list" --port-base "$port" \
    --host-command "$netns exec {host} sh -c" -- \
    "$build/tools/dist-train" --strategy multi_worker --model "$model" --threads 1 \
    --global-batch "$global_batch" --train-examples $((global_batch * 2 * steps)) --epochs 1 \
    --max-steps "$max_steps" --test-examples "$global_batch" --sharding "${level%%:*}" \
    "${reuse[@]}" --no-progress "$@" > "$log" 2>&1 || true
  local peak
  peak=$(grep -o '"peak_rss_bytes":[0-9]*' "$log" | head -1 | cut -d: -f2)
  echo "${peak:-failed}"
}

run_dist_train() {  # LEVEL ROUND
  local log=$out/dist-train-$1-$2.log saving=() peak
  if [[ ${SM_CHECKPOINT:-0} != 0 ]]; then
    saving=(--checkpoint-dir "$out/ckpt-$1-$2" --checkpoint-every 1 --max-to-keep 1)
  fi
  port=$((port + 10))
  peak=$(dist_train_job "$port" "$1" "$log" "$steps" "${saving[@]}")
  printf 'dist-train\t%s\t%s\n' "$1" "$peak" >> "$out/results.tsv"
  if [[ ${SM_CHECKPOINT:-0} == resume ]]; then
    port=$((port + 10))
    peak=$(dist_train_job "$port" "$1" "$out/dist-train-$1-$2-resume.log" $((2 * steps)) \
      "${saving[@]}")
    printf 'dist-train\t%s\t%s\n' "$1+resume" "$peak" >> "$out/results.tsv"
  fi
  rm -rf "$out/ckpt-$1-$2"
}

run_pytorch() {  # MODE ROUND
  local log=$out/pytorch-$1-$2.log pids=()
  port=$((port + 10))
  for ((r = 0; r < workers; r++)); do
    "$netns" exec "${hosts[$r]}" env LD_PRELOAD="$tcmalloc" GLOO_SOCKET_IFNAME=eth0 MASTER_ADDR="${hosts[0]}" \
      MASTER_PORT=$port RANK=$r WORLD_SIZE="$workers" OMP_NUM_THREADS=1 \
      timeout 1200 /usr/bin/python3 "$here/bench/pytorch_zero_memory.py" "$1" "$steps" 16 "$model" \
      >> "$log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  local peak
  peak=$(grep -o 'peak_rss_bytes [0-9]*' "$log" | head -1 | cut -d' ' -f2)
  printf 'pytorch\t%s\t%s\n' "$1" "${peak:-failed}" >> "$out/results.tsv"
}

for ((round = 1; round <= repeats; round++)); do
  for level in ${SM_LEVELS:-none optimizer gradients parameters}; do
    run_dist_train "$level" "$round"
  done
  if [[ ${SM_PYTORCH:-1} == 1 ]]; then
    for mode in plain zero; do run_pytorch "$mode" "$round"; done
  fi
done

python3 - "$out/results.tsv" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    framework, level, peak = line.split()
    rows.setdefault((framework, level), []).append(None if peak == "failed" else int(peak))
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
base = {"dist-train": median(rows.get(("dist-train", "none"), [])),
        "pytorch": median(rows.get(("pytorch", "plain"), []))}
print(f"{'framework':11} {'sharding':10} {'peak MiB':>9} {'x unsharded':>12} {'runs':>5}")
for (framework, level), values in rows.items():
    m = median(values)
    ratio = f"{m / base[framework]:.3f}" if m and base[framework] else "-"
    mib = f"{m / 2**20:.0f}" if m else "failed"
    print(f"{framework:11} {level:10} {mib:>9} {ratio:>12} {len(values):>5}")
PY
echo "raw outputs: $out"
