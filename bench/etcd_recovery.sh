#!/usr/bin/env bash
# Recovery from a lost worker with the job's state in etcd against the built-in store (issue 71,
# docs/elastic.md "Which rendezvous"): starts a three-member etcd (Debian's etcd-server) on
# free loopback ports in a temporary folder, then runs bench/elastic_recovery.sh twice in one
# session, with DIST_RENDEZVOUS unset (the built-in store) and set to that cluster (a prefix per
# run of a job: each job's chief takes it over from the previous one). Quote the ratio.
#
#   bench/etcd_recovery.sh [build-dir=build] [repeats=3]     (MODELS as elastic_recovery.sh's)
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
command -v etcd > /dev/null || { echo "etcd is not installed (apt-get install etcd-server)" >&2; exit 2; }
dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ports=($(python3 -c 'import socket
s=[socket.socket() for _ in range(6)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))'))
cluster=""
for i in 0 1 2; do cluster+="${cluster:+,}m$i=http://127.0.0.1:${ports[$((2 * i + 1))]}"; done
members=""
for i in 0 1 2; do
  client=${ports[$((2 * i))]}
  peer=${ports[$((2 * i + 1))]}
  members+="${members:+,}127.0.0.1:$client"
  etcd --name "m$i" --data-dir "$dir/m$i" --listen-client-urls "http://127.0.0.1:$client" \
    --advertise-client-urls "http://127.0.0.1:$client" --listen-peer-urls "http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "$cluster" \
    --initial-cluster-state new --logger zap --log-outputs "$dir/m$i.log" > /dev/null 2>&1 &
  pids+=($!)
done
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --dial-timeout 1s --command-timeout 2s --endpoints "$members" put /probe up \
    > /dev/null 2>&1 && break
  sleep 0.2
done
ETCDCTL_API=3 etcdctl --dial-timeout 1s --command-timeout 2s --endpoints "$members" put /probe up \
  > /dev/null || { echo "etcd did not come up; its logs:" >&2; tail -n 5 "$dir"/m*.log >&2; exit 1; }
export MODELS=${MODELS:-cnn:600:200}
echo "== the built-in store"
env -u DIST_RENDEZVOUS bash "$here/elastic_recovery.sh" "$build" "$repeats"
echo "== etcd: etcd://$members/bench/"
DIST_RENDEZVOUS="etcd://$members/bench/" bash "$here/elastic_recovery.sh" "$build" "$repeats"
