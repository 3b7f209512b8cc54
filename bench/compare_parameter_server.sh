#!/usr/bin/env bash
# ParameterServerStrategy (a chief, 2 workers, 1 ps task: build/bench/ps_bench) against
# MultiWorkerMirroredStrategy (2 workers: multi_worker_bench fashion_mnist) on the tutorial CNN
# and real Fashion-MNIST: images/s of the training loop and test accuracy after EPOCHS epochs,
# 64 examples per worker and step, SGD with learning rate 0.05, one thread per process.
# The runs alternate (MultiWorker, PS, MultiWorker, PS ...) REPEATS times; prints a Markdown
# table of the medians and the ratios PS / MultiWorker.
#
# Every process of a job is started here with its own TF_CONFIG on free 127.0.0.1 ports (not
# through dist-launch), under `timeout` (TIMEOUT_SECONDS per job, default 900 per epoch); a trap
# kills whatever is left when the script ends. Logs go to a temporary directory it names.
# A full epoch is 469 steps of 2 x 64 images for MultiWorker and 937 steps of 64 for PS (a PS
# step is one worker's batch); STEPS_PER_EPOCH > 0, for quick trials, gives both that many.
# MODEL=embedding trains bench/hashed_patch_model.h instead (a 1,000,000 x 64 embedding table
# that PS looks up and updates sparsely, MultiWorker all-reduces densely); the table then also
# shows the bytes a worker moves per step of its 64 images.
# LR sets SGD's learning rate (default 0.05).
#   [REPEATS=1] [STEPS_PER_EPOCH=0 (full epochs)] [MODEL=cnn|embedding] [LR=0.05]
#     bench/compare_parameter_server.sh BUILD [EPOCHS=3]
set -euo pipefail
build=${1:?usage: bench/compare_parameter_server.sh BUILD [EPOCHS=3]}
epochs=${2:-3}
repeats=${REPEATS:-1}
steps_per_epoch=${STEPS_PER_EPOCH:-0}
model=${MODEL:-cnn}
lr=${LR:-0.05}
limit=${TIMEOUT_SECONDS:-$((900 * epochs))}
args=(--epochs "$epochs" --batch 64 --steps-per-epoch "$steps_per_epoch" --lr "$lr" --model "$model")
for binary in ps_bench multi_worker_bench; do
  [[ -x $build/bench/$binary ]] || { echo "no $build/bench/$binary: build it first" >&2; exit 2; }
done
logs=$(mktemp -d /tmp/compare_parameter_server.XXXXXX)

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# N free loopback ports, held together while they are picked so that they differ.
free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}
addresses() { local out="" p; for p in "$@"; do out+="${out:+, }\"127.0.0.1:$p\""; done; echo "$out"; }

# start LOG CLUSTER TYPE INDEX COMMAND...: one task in the background, its pid in pids.
start() {
  local log=$1 cluster=$2 type=$3 index=$4
  shift 4
  TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
    timeout "$limit" "$@" >"$log" 2>&1 &
  pids+=($!)
}

# Waits for the job's processes (every pid in pids); as soon as one fails, names it, shows the
# ends of the logs and exits (the trap stops the others).
wait_job() {
  local name=$1 pid code
  while ((${#pids[@]})); do
    code=0
    wait -n -p pid "${pids[@]}" || code=$?
    local left=() p
    for p in "${pids[@]}"; do [[ $p == "$pid" ]] || left+=("$p"); done
    pids=("${left[@]}")
    if ((code)); then
      echo "$name: process $pid failed (exit code $code; 124: timeout after $limit s); logs:" >&2
      tail -n 20 "$logs/$name".*.log >&2
      exit 1
    fi
  done
}

run_multi_worker() {  # round $1; the chief's JSON line in $logs/multi_worker.$1.json
  local ports cluster
  read -r -a ports < <(free_ports 2)
  cluster="{\"worker\": [$(addresses "${ports[@]}")]}"
  export DIST_JOB_TOKEN
  DIST_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  for i in 0 1; do
    start "$logs/multi_worker.worker$i.log" "$cluster" worker "$i" \
      "$build/bench/multi_worker_bench" fashion_mnist "$model" "${args[@]}"
  done
  wait_job multi_worker
  unset DIST_JOB_TOKEN
  grep -h '^multi_worker_bench: epoch' "$logs/multi_worker.worker0.log" || true
  grep -h '^{' "$logs/multi_worker.worker0.log" >"$logs/multi_worker.$1.json"
}

run_ps() {  # round $1; the chief's JSON line in $logs/ps.$1.json
  local ports cluster
  read -r -a ports < <(free_ports 4)
  cluster="{\"chief\": [$(addresses "${ports[0]}")], \"worker\": [$(addresses "${ports[1]}" "${ports[2]}")], \"ps\": [$(addresses "${ports[3]}")]}"
  start "$logs/ps.ps0.log" "$cluster" ps 0 "$build/bench/ps_bench" "${args[@]}"
  for i in 0 1; do
    start "$logs/ps.worker$i.log" "$cluster" worker "$i" "$build/bench/ps_bench" "${args[@]}"
  done
  start "$logs/ps.chief.log" "$cluster" chief 0 "$build/bench/ps_bench" "${args[@]}"
  wait_job ps
  grep -h '^ps_bench: epoch' "$logs/ps.chief.log" || true
  grep -h '^{' "$logs/ps.chief.log" >"$logs/ps.$1.json"
}

field() { sed -nE "s/.*\"$1\": ([0-9.]+).*/\1/p" "$2"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

lscpu | grep -E '^(Model name|Flags):'
echo "logs: $logs"
mw_ips=() mw_acc=() ps_ips=() ps_acc=() mw_bytes=() ps_bytes=()
for ((r = 0; r < repeats; r++)); do
  run_multi_worker "$r"
  mw_ips+=("$(field images_per_s "$logs/multi_worker.$r.json")")
  mw_acc+=("$(field test_accuracy "$logs/multi_worker.$r.json")")
  mw_bytes+=("$(($(field bytes_out_per_step "$logs/multi_worker.$r.json") + $(field bytes_in_per_step "$logs/multi_worker.$r.json")))")
  echo "round $r multi_worker: $(cat "$logs/multi_worker.$r.json")"
  run_ps "$r"
  ps_ips+=("$(field images_per_s "$logs/ps.$r.json")")
  ps_acc+=("$(field test_accuracy "$logs/ps.$r.json")")
  ps_bytes+=("$(($(field bytes_out_per_step "$logs/ps.$r.json") + $(field bytes_in_per_step "$logs/ps.$r.json")))")
  echo "round $r parameter_server: $(cat "$logs/ps.$r.json")"
done

a=$(median "${mw_ips[@]}") b=$(median "${mw_acc[@]}") c=$(median "${ps_ips[@]}") d=$(median "${ps_acc[@]}")
e=$(median "${mw_bytes[@]}") f=$(median "${ps_bytes[@]}")
ratio() { echo "$1 / $2" | bc -l | awk '{printf "%.3f", $1}'; }
echo
steps_note=""
((steps_per_epoch == 0)) || steps_note=" of $steps_per_epoch steps"
described=$([[ $model == embedding ]] && echo "Hashed-patch embedding model (1,000,000 x 64 table)" || echo "Model '$model'")
echo "$described on Fashion-MNIST, $epochs epochs$steps_note, 64 examples per worker and step, SGD $lr; median of $repeats run(s)"
echo "(bytes per worker step: sent + received; PS counted by the strategy, MultiWorker the ring all-reduce volume of the whole gradient)"
echo
echo "| strategy | processes | images/s | test accuracy | bytes per worker step |"
echo "|---|---|---:|---:|---:|"
echo "| MultiWorkerMirroredStrategy, 2 workers | 2 | $a | $b | $e |"
echo "| ParameterServerStrategy, 2 workers + 1 ps + chief | 4 | $c | $d | $f |"
echo "| ratio PS / MultiWorker | | $(ratio "$c" "$a") | $(ratio "$d" "$b") | $(ratio "$f" "$e") |"
