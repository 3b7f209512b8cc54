#!/usr/bin/env bash
# Trains with dist-train on fifteen equivalence settings (six more across hosts with CW_HOSTS)
# with two builds and compares the saved weights tensor by tensor (sha256 of each tensor's
# bytes): a refactoring must leave them bit-identical. A directory holds tools/ as a build tree
# does.
#   bench/compare_weights.sh BEFORE_DIR AFTER_DIR
# CW_HOSTS=N (as root): also every sharding level, mlp and cnn, on N namespace hosts at 1 Gbit/s
# (scripts/netns-cluster.sh): the transport's rings and pieces, which one host's shared memory
# never runs.
set -uo pipefail
before=$1
after=$2
work=$(mktemp -d)
netns=$(dirname "$0")/../scripts/netns-cluster.sh
hosts_n=${CW_HOSTS:-0}
cleanup() {
  ((hosts_n > 1)) && "$netns" down cw >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
if ((hosts_n > 1)); then
  "$netns" up cw "$hosts_n" 1gbit >/dev/null || exit 1
fi
across_hosts() {  # across_hosts BUILD OUT
  local build=$1 out=$2 hosts port=29800 model level name
  hosts=$("$netns" addresses cw | paste -sd, -)
  for model in mlp cnn; do
    for level in optimizer gradients parameters; do
      port=$((port + 10)) name=hosts-$model-$level
      timeout 300 "$build/tools/dist-launch" --hosts "$hosts" --port-base "$port" \
        --host-command "$netns exec {host} sh -c" -- "$build/tools/dist-train" \
        --strategy multi_worker --model "$model" --threads 1 --epochs 1 --train-examples 1024 \
        --global-batch $((64 * hosts_n)) --test-examples 1000 --no-progress --seed 7 \
        --sharding "$level" --save-weights "$out/$name.safetensors" >"$out/$name.log" 2>&1 ||
        echo "$name failed (see $out/$name.log)"
    done
  done
}
common="--epochs 1 --train-examples 1536 --global-batch 96 --no-progress --seed 7"
train() {  # train BUILD OUT
  local build=$1 out=$2
  mkdir -p "$out"
  export DIST_STORE_HOST=$build/tools/dist-store-host
  run() { local name=$1; shift; "$build/tools/dist-train" "$@" --save-weights "$out/$name.safetensors" > "$out/$name.log" 2>&1 || echo "$name failed (see $out/$name.log)"; }
  run one_device $common --strategy one_device
  run default_sgd $common --strategy default --optimizer sgd --lr 0.05
  run mirrored2 $common --strategy mirrored --replicas 2
  run mirrored3_sgd $common --strategy mirrored --replicas 3 --optimizer sgd --lr 0.05
  run central3 $common --strategy central_storage --replicas 3
  run hier4 $common --strategy mirrored --replicas 4 --cross-device-ops hierarchical_copy
  run mlp2 --epochs 1 --train-examples 384 --global-batch 96 --no-progress --seed 7 --strategy mirrored --replicas 2 --model mlp
  run fit2 $common --strategy mirrored --replicas 2 --loop fit
  "$build/tools/dist-launch" --workers 2 --replicas-per-worker 2 -- "$build/tools/dist-train" --strategy multi_worker $common --save-weights "$out/mw2x2.safetensors" > "$out/mw2x2.log" 2>&1 || echo "mw2x2 failed"
  "$build/tools/dist-launch" --workers 3 -- "$build/tools/dist-train" --strategy multi_worker $common --save-weights "$out/mw3x1.safetensors" > "$out/mw3x1.log" 2>&1 || echo "mw3x1 failed"
  # Stops within an epoch: --max-steps in both loops, with checkpoints every 5 steps.
  run fit2_max7 $common --strategy mirrored --replicas 2 --loop fit --max-steps 7
  run custom2_max7 $common --strategy mirrored --replicas 2 --max-steps 7 --checkpoint-dir "$out/ckpt-custom2" --checkpoint-every 5
  # Parameter servers with one worker: its steps run one at a time, so the result is exact.
  ps() { local name=$1; shift; "$build/tools/dist-launch" --workers 1 --ps 1 -- "$build/tools/dist-train" --strategy parameter_server $common "$@" --save-weights "$out/$name.safetensors" > "$out/$name.log" 2>&1 || echo "$name failed (see $out/$name.log)"; }
  ps ps1 --optimizer sgd --lr 0.05
  ps ps1_fit --loop fit
  ps ps1_max23 --max-steps 23 --checkpoint-dir "$out/ckpt-ps1" --checkpoint-every 5
}
train "$before" "$work/before"
train "$after" "$work/after"
if ((hosts_n > 1)); then
  across_hosts "$before" "$work/before"
  across_hosts "$after" "$work/after"
fi
python3 - "$work/before" "$work/after" <<'PY'
import hashlib, json, os, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: hashlib.sha256(body[v["data_offsets"][0]:v["data_offsets"][1]]).hexdigest()
            for k, v in header.items() if k != "__metadata__"}
a_dir, b_dir = sys.argv[1:3]
failed = 0
for name in sorted(os.listdir(a_dir)):
    if not name.endswith(".safetensors"): continue
    b = os.path.join(b_dir, name)
    same = os.path.exists(b) and tensors(os.path.join(a_dir, name)) == tensors(b)
    failed += not same
    print(f"{name}: {'bit-identical' if same else 'DIFFERENT'}")
sys.exit(1 if failed else 0)
PY
