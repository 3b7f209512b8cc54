#!/usr/bin/env bash
# Recovery from a lost worker (issue 37, docs/elastic.md): 3 worker processes on this machine
# (dist-launch), SGD, global batch 60; worker:1 SIGKILLs itself once step KILL completes
# (killed_train --kill-at-step, tests/tools/killed_train_main.cc). Per model (the tutorial CNN,
# then the 20M-parameter MLP), alternating in each round:
#   fixed        dist-launch --workers 3, no loss: the baseline
#   elastic      dist-launch --workers 2:3 (dist-train --min-workers 2, state committed to
#                memory every step), no loss: what committing costs
#   in-memory    the same with the loss: the survivors go on at 2 from their memory, and
#                dist-launch starts worker:1 again, which joins (back to 3)
#   checkpoint   dist-launch --workers 3 --max-restarts 1, --checkpoint-every 10: everyone is
#                stopped and started again from the checkpoint of step KILL on disk
# "recovery" is from the kill (the victim's own clock, printed just before it raises SIGKILL
# after step KILL) to the first later step any worker completes (killed_train --print-steps); "lost"
# is the run's wall time minus the fixed run's of the same round. Medians over REPEATS rounds.
#
# LOOP=fit runs every variant through dist-train --loop fit (default: custom); MODELS picks the
# models as model:steps:kill (default "cnn:600:200 mlp:60:20").
#
#   bench/elastic_recovery.sh [build-dir=build] [repeats=3]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
repeats=${2:-3}
work=$(mktemp -d)
[[ -n ${KEEP_LOGS:-} ]] && echo "logs in $work"
trap '[[ -n ${KEEP_LOGS:-} ]] || rm -rf "$work"' EXIT
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }

lscpu | grep -E '^Model name|^CPU\(s\)' | sed 's/  */ /g'
echo "loop: ${LOOP:-custom}"
echo "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# recovery seconds from the log of a run with a kill: first "step N done at T" after the kill.
recovery() {
  awk '/killed_train: killed at/ {kill = $NF; step = $5}
       /killed_train: step [0-9]+ done at/ {if (kill && $4 > step && !first) first = $NF}
       END {if (kill && first) printf "%.2f", (first - kill) / 1000; else print "nan"}' "$1"
}

run() {  # variant model steps kill log
  local variant=$1 model=$2 steps=$3 kill=$4 log=$5
  local job=(--strategy multi_worker --loop "${LOOP:-custom}" --model "$model" --optimizer sgd --global-batch 60
    --train-examples $((60 * steps)) --test-examples 500 --epochs 1 --no-progress
    --collective-timeout 60 --print-steps)
  local launch=(--workers 3) faults=()
  case $variant in
    elastic) launch=(--workers 2:3) ;;
    in-memory) launch=(--workers 2:3) faults=(--kill-at-step "$kill" --kill-worker 1) ;;
    checkpoint)
      launch=(--workers 3 --max-restarts 1)
      faults=(--kill-at-step "$kill" --kill-worker 1)
      rm -rf "$work/ckpt"
      job+=(--checkpoint-dir "$work/ckpt" --checkpoint-every 10)
      ;;
  esac
  local start
  start=$(now)
  "$build/tools/dist-launch" "${launch[@]}" -- "$build/tests/killed_train" "${faults[@]}" \
    "${job[@]}" >"$log" 2>&1 || echo "$variant $model: dist-launch exited $? (log: $log)" >&2
  echo "$(now) - $start" | bc -l
}

for spec in ${MODELS:-cnn:600:200 mlp:60:20}; do
  IFS=: read -r model steps kill <<<"$spec"
  declare -A times=() recoveries=() lost=()
  for ((i = 0; i < repeats; i++)); do
    line="$model round $i:"
    for variant in fixed elastic in-memory checkpoint; do
      log="$work/$model-$variant-$i.log"
      t=$(run "$variant" "$model" "$steps" "$kill" "$log")
      times[$variant]+="$t "
      [[ $variant == fixed ]] && fixed_t=$t
      lost[$variant]+="$(echo "$t - $fixed_t" | bc -l) "
      line+=" $variant $(printf '%.1f' "$t") s"
      if [[ $variant == in-memory || $variant == checkpoint ]]; then
        r=$(recovery "$log")
        recoveries[$variant]+="$r "
        line+=" (recovery $r s)"
      fi
      [[ $variant == in-memory ]] && grep -h 'Elastic: ' "$log" | sed 's/^/    /'
    done
    echo "$line"
  done
  for variant in fixed elastic in-memory checkpoint; do
    out="$model $variant: median wall $(printf '%.2f' "$(median ${times[$variant]})") s"
    [[ $variant != fixed ]] && out+=", lost vs fixed $(printf '%.2f' "$(median ${lost[$variant]})") s"
    [[ -n ${recoveries[$variant]:-} ]] && out+=", recovery $(median ${recoveries[$variant]}) s (runs: ${recoveries[$variant]})"
    echo "$out"
  done
  unset times recoveries lost
done
