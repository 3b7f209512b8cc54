#!/usr/bin/env bash
# The scaling study across hosts (issue 33, docs/hosts-scaling.md): the tutorial CNN and the
# 20M-parameter MLP on 1, 2 and 4 hosts x 1 replica, hosts being network namespaces of
# scripts/netns-cluster.sh with links unlimited, 10gbit and 1gbit; dist-train multi_worker over
# Gloo (dist-launch --hosts) and over Open MPI (mpirun), against PyTorch DDP (gloo backend,
# tcmalloc preloaded, bench/pytorch_ddp_hosts.py) in the same namespaces. 1 intra-op thread per
# worker, 64 examples per worker per step (global batch 64 x hosts), Adam 1e-3.
#
#   bench/hosts_scaling.sh [build-dir=build] [repeats=3]      (root: it makes namespaces)
#
# Prints images/s, bytes sent per step per worker and scaling efficiency as Horovod reports it
# (images/s with N hosts / (N x images/s with 1 host), same framework), and the headline: 2 hosts
# at 1gbit, both models, Gloo vs MPI vs DDP alternating (A B C A B C ...), medians of REPEATS,
# each against the link's own limit (the images of the steps the measured link carries a
# second: link bytes/s over the run's eth0 bytes per step; measure_link below).
# Every other cell is one run.
#
# Throughput, steady state: dist-train trains epochs of K steps (--train-examples = K x global
# batch; cnn K=60 (HS_CNN_STEPS), 4 epochs; mlp K=8, 3 epochs); an epoch line's images/s counts its training
# steps only (not the test pass after it); the figure is the median of the epochs after the
# first (which carries the first steps' warm-up). DDP: 3 warm-up steps, then the same number of
# steps timed between two barriers. Start-up is excluded from both.
# Bytes: eth0 tx_bytes of each host's namespace (everything the worker sends, TCP/IP and
# Ethernet headers, ACKs included). dist-train: a second, short run (--max-steps 2) gives what
# start-up sends; (bytes of the long run - bytes of the short run) / (steps difference).
# DDP: tx_bytes read by the worker itself around the timed steps.
#
# Environment: HS_MODELS ("cnn mlp"), HS_BACKENDS ("gloo ddp mpi"; also mpiring: MPI with
# libnbc's ring all-reduce, and gloo@DIR: the dist-train of another build directory DIR over
# Gloo, say of the commit before a change, so a change is measured against its base in one
# alternating run; the headline then prints each against gloo; and the gradient compression
# variants below), HS_PHASES ("headline sweep"; also synthetic: multi_worker_bench
# against DDP, like for like; HS_MWB_VARIANTS adds multi_worker_bench layouts to it, as
# "unchecked after_backward", and HS_SYNTHETIC_RATES its links, default "1gbit unlimited"),
# HS_MPI_ARGS (more mpirun arguments), HS_SWEEP_HOSTS ("2 4") and HS_SWEEP_RATES ("unlimited
# 10gbit 1gbit"): the sweep's cells beyond one host,
# HS_DDP_CNN (cnn-channels-last, or cnn for DDP's CNN in the default layout), HS_OUT (a
# directory for raw outputs and results.tsv; default a new one in /tmp; results are appended,
# so phases can be run apart and summarized together), HS_SUMMARY_ONLY=1 (only print the tables
# of HS_OUT/results.tsv).
#
# Gradient compression variants, in HS_BACKENDS beside the others (same rotation, same cells):
#   gloo+COMP   dist-train over Gloo exactly as gloo, plus --gradient-compression COMP (bf16,
#               fp16, powersgd:RANK[:START], none), as gloo+bf16, gloo+fp16, gloo+powersgd:4:2;
#               gloo+sharding:LEVEL[:REUSE]: plus --sharding LEVEL (optimizer, gradients,
#               parameters; issue 35), and --sharding-reuse-bytes REUSE when given (stage 3 only;
#               -1: every layer kept whole from forward to backward);
#               gloo+timeline: plus --timeline (its cost; the files stay in HS_OUT/raw).
#   ddp+fp16, ddp+bf16, ddp+powersgd:RANK[:START]   DDP as ddp with one of PyTorch's
#               communication hooks (bench/pytorch_ddp_hosts.py): fp16_compress_hook,
#               bf16_compress_hook, powerSGD_hook with PowerSGDState(matrix_approximation_rank=
#               RANK, start_powerSGD_iter=START, use_error_feedback=True, warm_start=True), START
#               10 when not given (dist-train's default), at least 2 (PyTorch refuses less); its
#               warm-up is START + 1 steps when that is more than 3, so every timed step is
#               compressed. PyTorch 1.13 (Debian's) refuses the bf16 hook without NCCL ("BF16 all
#               reduce communication hook required CUDA 11+ and NCCL 2.10+."), and its gloo has no
#               bfloat16 all-reduce: ddp+bf16 is a failed cell here. ddp+powersgd on the MLP
#               aborts inside Gloo ("op.preamble.length <= op.nbytes"): a failed cell too.
# PowerSGD's START: keep it at most one epoch (cnn 60 steps, mlp 8) so that the epochs timed are
# all compressed, and 2 for bytes comparable with DDP's: eth0's figure is the long run's minus the
# short run's 2 steps, so it averages START - 2 plain steps in, while dist-train's own counter
# (below) is its average over all the run's steps, the START plain ones included.
# A run that fails is a failed cell and the bench goes on; results.tsv keeps the first error
# line of its output (one that only names a lost peer when there is no other). dist-train's line
# "Bytes sent per step per worker: N (library counter, S steps)" of the long run (the mean of
# the workers that print one) is kept too. For each variant at 2 hosts on 1gbit the headline
# prints images/s, its ratio to gloo (the speed-up) and to ddp and each ddp+ variant run, and
# bytes per step per worker (eth0, library counter), or the failure with its error line.
# results.tsv columns 8 and 9: the library counter (or na), the first error line (or -).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repeats=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
models=${HS_MODELS:-cnn mlp}
backends=${HS_BACKENDS:-gloo ddp mpi}
phases=${HS_PHASES:-headline sweep}
out=${HS_OUT:-$(mktemp -d /tmp/hosts_scaling.XXXXXX)}
mkdir -p "$out/raw"
results=$out/results.tsv
cluster=hscale
netns=$here/scripts/netns-cluster.sh
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
run_timeout=400

# Steps per epoch and epochs of the long dist-train run, per model.
# HS_CNN_STEPS: the CNN's steps per epoch (default 60; its epochs of about a second swing by
# 10-25% from round to round at 2 hosts, so a ratio near 1 wants longer ones, e.g. 240).
steps_per_epoch() { if [[ $1 == mlp ]]; then echo 8; else echo "${HS_CNN_STEPS:-60}"; fi; }
epochs_of() { if [[ $1 == mlp ]]; then echo 3; else echo 4; fi; }

summary() { /usr/bin/python3 "$here/bench/lib/hosts_scaling_report.py" "$results"; }

if [[ ${HS_SUMMARY_ONLY:-0} == 1 ]]; then
  summary
  exit 0
fi

for backend in $backends; do
  if [[ $backend == ddp+* && ! $backend =~ ^ddp\+(fp16|bf16|powersgd:[1-9][0-9]*(:[0-9]+)?)$ ]] ||
    [[ $backend == gloo+ ]]; then
    echo "backend '$backend': use ddp+fp16, ddp+bf16, ddp+powersgd:RANK[:START] or gloo+COMP" >&2
    exit 2
  fi
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Fashion-MNIST with the test set cut to its first 1000 examples: the test pass after each
# epoch is not timed, but on the MLP the full 10000 would take longer than the training.
data=$out/fashion-mnist
if [[ ! -f $data/t10k-labels-idx1-ubyte.gz ]]; then
  mkdir -p "$data"
  ln -sf /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz "$data/"
  ln -sf /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz "$data/"
  /usr/bin/python3 - /usr/share/datasets/fashion-mnist "$data" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, header, item in (("t10k-images-idx3-ubyte.gz", 16, 784), ("t10k-labels-idx1-ubyte.gz", 8, 1)):
    raw = gzip.open(f"{src}/{name}").read()
    head = bytearray(raw[:header])
    head[4:8] = struct.pack(">I", 1000)
    with gzip.open(f"{dst}/{name}", "wb") as f:
        f.write(bytes(head) + raw[header:header + 1000 * item])
PY
fi

cleanup() { "$netns" down "$cluster" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$netns" down "$cluster" >/dev/null 2>&1 || true
"$netns" up "$cluster" 4 unlimited >/dev/null
mapfile -t addr < <("$netns" addresses "$cluster")
current_rate=unlimited
set_rate() {
  local rate=$1
  [[ $rate == none ]] && rate=unlimited
  if [[ $rate != "$current_rate" ]]; then
    "$netns" rate "$cluster" "$rate" >/dev/null
    current_rate=$rate
  fi
}

# Sum of eth0 tx_bytes over the first N hosts.
tx_sum() {
  local n=$1 i total=0
  for ((i = 0; i < n; i++)); do
    total=$((total + $("$netns" exec "${addr[i]}" cat /sys/class/net/eth0/statistics/tx_bytes)))
  done
  echo "$total"
}

# Kills what a failed run left on the hosts (processes this script started, by pid).
reap() {
  local pids
  pids=$("$netns" pids "$cluster" || true)
  if [[ -n $pids ]]; then
    echo "  leftover processes after a run: $(echo "$pids" | tr '\n' ' '), killing them" >&2
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 1
  fi
}

# The first line of FILES that reads as an error: a Python exception's last line, a C++
# exception's what(), a dist-train or dist-launch message, a Gloo enforce. One that only names a
# lost peer (what the survivors of a failed worker say) or the launcher's exit summary only when
# no other; with none, the exit code RC. Tabs become spaces (results.tsv is tab-separated).
first_error() {
  local rc=$1 none
  shift
  none="no error line in the output, exit code $rc"
  ((rc == 124 || rc == 137)) && none+=" (timed out after $run_timeout s)"
  cat "$@" 2>/dev/null | awk -v none="$none" '
    /^(\[[^]]*\] ?)?[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Exit|NotMet): |what\(\): |^(\[[^]]*\] ?)?dist-(train|launch): |not expected|enforce fail|Segmentation fault|Aborted|Killed/ {
      if ($0 ~ /Connection (closed|reset) by peer|Broken pipe|lost worker|failed with exit code|stopped, resumable/) {
        if (second == "") second = $0
      } else { print; found = 1; exit }
    }
    END { if (!found) print (second != "" ? second : none) }' |
    tr '\t' ' ' | sed -E 's/^ +//' | cut -c1-300
}

# dist-train's own bytes per step per worker (the mean of its workers' lines), or na.
library_bytes() {
  sed -nE 's/.*Bytes sent per step per worker: ([0-9]+) \(library counter.*/\1/p' "$1" |
    awk '{s += $1} END {if (NR) printf "%.0f", s / NR; else print "na"}'
}

# A new port base for each run (runs measure in subshells: measure moves it, in the parent).
port=7400
next_port() { port=$((port + 10 > 7900 ? 7400 : port + 10)); }
hosts_csv() { local n=$1; local IFS=,; echo "${addr[*]:0:n}"; }

# dist-train on N hosts with BACKEND (gloo|mpi), MODEL, extra flags; output to FILE.
dist_run() {
  local backend=$1 model=$2 n=$3 file=$4
  shift 4
  local mpi_args=()
  read -r -a mpi_args <<<"${HS_MPI_ARGS:-}"
  if [[ $backend == mpiring ]]; then
    # Open MPI 4.1's libnbc picks a binomial tree (reduce to rank 0, then broadcast) for every
    # in-place MPI_Iallreduce; this asks it for its ring instead.
    backend=mpi mpi_args+=(--mca coll_libnbc_iallreduce_algorithm 1)
  fi
  local binary=$build/tools/dist-train compression=()
  if [[ $backend == gloo@* ]]; then
    binary=${backend#gloo@}/tools/dist-train
    backend=gloo
  elif [[ $backend == gloo+sharding:* ]]; then
    local level=${backend#gloo+sharding:}
    compression=(--sharding "${level%%:*}")
    [[ $level == *:* ]] && compression+=(--sharding-reuse-bytes "${level#*:}")
    backend=gloo
  elif [[ $backend == gloo+timeline ]]; then
    # Each run its own files (one per worker: FILE.worker-N.json), kept in HS_OUT/raw.
    compression=(--timeline "$out/raw/timeline-$model-$n-$(date +%s%N).json")
    backend=gloo
  elif [[ $backend == gloo+* ]]; then
    compression=(--gradient-compression "${backend#gloo+}")
    backend=gloo
  fi
  local train=("$binary" --strategy multi_worker --model "$model" --threads 1
    --batch-per-replica 64 --no-progress --data-dir "$data" --collective-timeout 120
    --collective-backend "$backend" "${compression[@]}" "$@")
  local hosts rc=0
  hosts=$(hosts_csv "$n")
  if [[ $backend == gloo ]]; then
    timeout -k 10 "$run_timeout" "$build/tools/dist-launch" --hosts "$hosts" --port-base "$port" \
      --host-command "$netns exec {host} sh -c" -- "${train[@]}" >"$file" 2>&1 || rc=$?
  else
    local token
    token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
    # --bind-to none: each host's Open MPI daemon takes the machine's cores for its own and
    # binds its rank to core 0, so every rank would share one core (a 32-byte all-reduce then
    # takes 4 ms, a scheduler time slice, instead of 8 us). rtc_hwloc_vmhole none: a daemon
    # mapping its topology into a hole of its address space crashed there once.
    timeout -k 10 "$run_timeout" "$netns" exec "${addr[0]}" mpirun --allow-run-as-root \
      --bind-to none --mca rtc_hwloc_vmhole none --mca plm_rsh_agent "$netns shell" --mca pml ob1 --mca btl tcp,self "${mpi_args[@]}" \
      -H "$hosts" -np "$n" \
      -x DIST_NODE_LIST="$hosts" -x DIST_PORT_BASE="$port" -x DIST_JOB_TOKEN="$token" \
      "${train[@]}" >"$file" 2>&1 || rc=$?
  fi
  ((rc == 0)) || reap
  return "$rc"
}

# One dist-train measurement: prints "IMAGES_PER_SEC BYTES_PER_STEP_PER_WORKER LIBRARY_BYTES"
# (bytes "na" on one host or without the short run; LIBRARY_BYTES dist-train's own count, na
# when it prints none); a failed run "failed failed na FIRST_ERROR_LINE". WITH_SHORT=1 also runs
# the short run for the bytes.
run_dist() {
  local backend=$1 model=$2 n=$3 rate=$4 tag=$5 with_short=$6
  local k e global steps
  k=$(steps_per_epoch "$model") e=$(epochs_of "$model")
  global=$((64 * n)) steps=$((k * e))
  local long=$out/raw/$tag.long short=$out/raw/$tag.short
  local t0 t1 s0 s1
  local rc=0
  t0=$(tx_sum "$n")
  dist_run "$backend" "$model" "$n" "$long" --train-examples $((k * global)) --epochs "$e" || rc=$?
  if ((rc != 0)); then
    echo "  $tag failed (exit code; last lines of $long):" >&2
    tail -5 "$long" | sed 's/^/    /' >&2
    echo "failed failed na $(first_error "$rc" "$long")"
    return
  fi
  t1=$(tx_sum "$n")
  local ips epochs
  mapfile -t epochs < <(sed -nE 's/.* ([0-9.]+) images\/s.*/\1/p' "$long" | tail -n +2)
  ips=$(median "${epochs[@]}")
  grep -m1 'Between workers' "$long" | sed "s/^/  $tag: /" >&2 || true
  local bps=na
  if [[ $with_short == 1 && $n -gt 1 ]]; then
    port=$((port + 5)) # this subshell's own copy: the short run on ports of its own
    s0=$(tx_sum "$n")
    if dist_run "$backend" "$model" "$n" "$short" --train-examples $((k * global)) --epochs "$e" \
      --max-steps 2; then
      s1=$(tx_sum "$n")
      bps=$(echo "(($t1 - $t0) - ($s1 - $s0)) / ($steps - 2) / $n" | bc -l | cut -d. -f1)
    fi
  fi
  echo "$ips $bps $(library_bytes "$long")"
}

# One DDP measurement on N hosts: prints "IMAGES_PER_SEC BYTES_PER_STEP_PER_WORKER"; with HOOK
# (fp16, bf16, powersgd:R[:START]) DDP's communication hook; a failed run prints
# "failed failed na FIRST_ERROR_LINE".
run_ddp() {
  local model=$1 n=$2 tag=$3 hook=()
  [[ -n ${4:-} ]] && hook=("$4")
  local k e steps i rc=0
  k=$(steps_per_epoch "$model") e=$(epochs_of "$model")
  steps=$((k * (e - 1)))
  # dist's reference CNN runs channels-last; DDP gets the same layout (PyTorch's CPU advice).
  local ddp_model=$model
  [[ $model == cnn ]] && ddp_model=${HS_DDP_CNN:-cnn-channels-last}
  local pids=()
  for ((i = 0; i < n; i++)); do
    timeout -k 10 "$run_timeout" "$netns" exec "${addr[i]}" env LD_PRELOAD="$tcmalloc" \
      GLOO_SOCKET_IFNAME=eth0 MASTER_ADDR="${addr[0]}" MASTER_PORT="$port" RANK="$i" \
      WORLD_SIZE="$n" THREADS=1 OMP_NUM_THREADS=1 \
      /usr/bin/python3 "$here/bench/pytorch_ddp_hosts.py" "$ddp_model" 3 "$steps" "${hook[@]}" \
      >"$out/raw/$tag.rank$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=$?; done
  if ((rc != 0)); then
    reap
    echo "  $tag failed: $(tail -3 "$out/raw/$tag.rank0" | tr '\n' ' ')" >&2
    echo "failed failed na $(first_error "$rc" "$out/raw/$tag".rank*)"
    return
  fi
  local ips bps
  ips=$(sed -nE 's/.*: ([0-9.]+) images\/s steady.*/\1/p' "$out/raw/$tag.rank0")
  bps=$(cat "$out/raw/$tag".rank* | sed -nE 's/.*tx_bytes_per_step ([0-9]+)/\1/p' |
    awk '{s += $1} END {printf "%.0f", s / NR}')
  ((n > 1)) || bps=na
  echo "$ips $bps"
}

# multi_worker_bench (bench/multi_worker_bench.cc: MultiWorkerMirroredStrategy over Gloo, one
# fixed synthetic batch, Adam, 5 warm-up steps then the timed ones, no data pipeline and no
# metrics: what DDP's script does) on N hosts: prints "IMAGES_PER_SEC na". Backend mwb runs its
# layout multi_worker; mwb-X runs multi_worker_X (as mwb-unchecked, mwb-after_backward).
run_mwb() {
  local model=$1 n=$2 tag=$3 backend=$4
  local k e rc=0 hosts layout=multi_worker
  [[ $backend == mwb-* ]] && layout=multi_worker_${backend#mwb-}
  k=$(steps_per_epoch "$model") e=$(epochs_of "$model")
  hosts=$(hosts_csv "$n")
  timeout -k 10 "$run_timeout" "$build/tools/dist-launch" --hosts "$hosts" --port-base "$port" \
    --host-command "$netns exec {host} sh -c" -- "$build/bench/multi_worker_bench" "$layout" \
    "$model" $((k * (e - 1))) >"$out/raw/$tag" 2>&1 || rc=$?
  if ((rc != 0)); then
    reap
    echo "  $tag failed: $(tail -3 "$out/raw/$tag" | tr '\n' ' ')" >&2
    echo "failed na"
    return
  fi
  echo "$(sed -nE 's/.* ([0-9.]+) images\/s.*/\1/p' "$out/raw/$tag" | tail -1) na"
}

# One cell: MODEL BACKEND N RATE ROUND; appends to results.tsv and prints it.
measure() {
  local model=$1 backend=$2 n=$3 rate=$4 round=$5 with_short=${6:-1}
  set_rate "$rate"
  next_port
  local tag=$model.${backend//[\/@:]/_}.${n}h.$rate.r$round result start
  start=$(date +%s)
  if [[ $backend == ddp || $backend == ddp-s ]]; then
    result=$(run_ddp "$model" "$n" "$tag")
  elif [[ $backend == ddp+* ]]; then
    result=$(run_ddp "$model" "$n" "$tag" "${backend#ddp+}")
  elif [[ $backend == mwb* ]]; then
    result=$(run_mwb "$model" "$n" "$tag" "$backend")
  else
    result=$(run_dist "$backend" "$model" "$n" "$rate" "$tag" "$with_short")
  fi
  local ips bps lib err shown
  read -r ips bps lib err <<<"$result"
  lib=${lib:-na} err=${err:--}
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$backend" "$n" "$rate" "$ips" "$bps" \
    "$round" "$lib" "$err" >>"$results"
  shown="$ips $bps"
  if [[ $backend == gloo+* || $backend == ddp+* ]]; then
    [[ $lib == na ]] || shown+=", library counter $lib"
    [[ $err == - ]] || shown+=": $err"
  fi
  echo "$(date +%T) $model $backend ${n} host(s) link $rate round $round: images/s, bytes/step/worker = $shown ($(($(date +%s) - start)) s)"
}

# The link itself: a TCP stream each way between hosts 0 and 1 at RATE for 5 s, at once (a
# ring all-reduce of 2 hosts sends and receives at once; tc limits each direction apart). The
# slower direction's eth0 bytes a second (headers included, as the runs' bytes per step are)
# go to results.tsv as a row "link tcp 2 RATE BYTES_PER_S": the report divides each run's
# bytes per step by it, the most steps a second the link allows.
measure_link() {
  local rate=$1 seconds=5 i before=() after=() pids=() slowest=
  set_rate "$rate"
  next_port
  for i in 0 1; do
    "$netns" exec "${addr[i]}" /usr/bin/python3 "$here/bench/lib/link_probe.py" serve "$port" &
    pids+=($!)
  done
  for i in 0 1; do before[i]=$("$netns" exec "${addr[i]}" cat /sys/class/net/eth0/statistics/tx_bytes); done
  for i in 0 1; do
    "$netns" exec "${addr[i]}" /usr/bin/python3 "$here/bench/lib/link_probe.py" send \
      "${addr[1 - i]}" "$port" "$seconds" &
    pids+=($!)
  done
  wait "${pids[@]}" || echo "  the link measurement failed; its figure is what was sent" >&2
  for i in 0 1; do
    after[i]=$("$netns" exec "${addr[i]}" cat /sys/class/net/eth0/statistics/tx_bytes)
    local rate_i=$(((after[i] - before[i]) / seconds))
    [[ -z $slowest || $rate_i -lt $slowest ]] && slowest=$rate_i
  done
  printf 'link\ttcp\t2\t%s\t%s\tna\t1\tna\t-\n' "$rate" "$slowest" >>"$results"
  echo "$(date +%T) link $rate: a TCP stream each way, the slower $((slowest * 8 / 1000000)) Mbit/s on eth0"
}

echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'); flags: $(lscpu | sed -nE 's/^Flags: +//p' | tr ' ' '\n' | grep -E '^(fma|avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' ')"
echo "cores: $(nproc); hosts: ${addr[*]}; raw outputs and results.tsv in $out"
[[ -f $results ]] || printf '# model\tbackend\thosts\tlink\timages_per_sec\tbytes_per_step_per_worker\tround\tlibrary_bytes_per_step_per_worker\terror\n' >"$results"

for phase in $phases; do
  case $phase in
    headline)
      # 2 hosts at 1gbit, both models, alternating A B C A B C; bytes from the first round.
      measure_link 1gbit
      for model in $models; do
        for ((r = 1; r <= repeats; r++)); do
          for backend in $backends; do
            measure "$model" "$backend" 2 1gbit "$r" "$((r == 1 ? 1 : 0))"
          done
        done
      done ;;
    sweep)
      # Everything else once; the backends in the order given (MPI last by default).
      for backend in $backends; do
        for model in $models; do
          measure "$model" "$backend" 1 none 1
          for n in ${HS_SWEEP_HOSTS:-2 4}; do
            for rate in ${HS_SWEEP_RATES:-unlimited 10gbit 1gbit}; do
              [[ $n == 2 && $rate == 1gbit && $phases == *headline* ]] && continue
              measure "$model" "$backend" "$n" "$rate" 1
            done
          done
        done
      done ;;
    synthetic)
      # Like for like with DDP's script: multi_worker_bench (synthetic batch, no pipeline, no
      # metrics) against DDP, 2 hosts, alternating; rows "mwb" (and "mwb-X" for each layout
      # multi_worker_X named in HS_MWB_VARIANTS, as "unchecked after_backward") and "ddp-s".
      for model in $models; do
        for rate in ${HS_SYNTHETIC_RATES:-1gbit unlimited}; do
          for ((r = 1; r <= repeats; r++)); do
            measure "$model" mwb 2 "$rate" "$r"
            for variant in ${HS_MWB_VARIANTS:-}; do measure "$model" "mwb-$variant" 2 "$rate" "$r"; done
            measure "$model" ddp-s 2 "$rate" "$r"
          done
        done
      done ;;
    *) echo "unknown phase '$phase'" >&2; exit 2 ;;
  esac
done
summary
