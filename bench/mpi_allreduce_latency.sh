#!/usr/bin/env bash
# Open MPI's all-reduce latency between two hosts of scripts/netns-cluster.sh, with mpirun's
# default binding and with --bind-to none. Each host's Open MPI daemon takes the machine's cores
# for its own and binds its rank to core 0, so on namespace hosts of one machine every rank
# shares one core; this shows what that costs (docs/hosts-scaling.md).
#   bench/mpi_allreduce_latency.sh [rate=1gbit]        (root: it makes namespaces)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
net=$here/scripts/netns-cluster.sh
rate=${1:-1gbit}
work=$(mktemp -d /tmp/mpi_latency.XXXXXX)
cleanup() { "$net" down mpilat >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
mpicxx -O2 -o "$work/latency" "$here/bench/mpi_allreduce_latency.cc"
"$net" down mpilat >/dev/null 2>&1 || true
"$net" up mpilat 2 "$rate" >/dev/null
mapfile -t addr < <("$net" addresses mpilat)
echo "CPU: $(lscpu | sed -nE 's/^Model name: +//p'), $(nproc) cores; link $rate"
for binding in core none; do
  echo "== mpirun --bind-to $binding"
  timeout 300 "$net" exec "${addr[0]}" mpirun --allow-run-as-root --bind-to "$binding" \
    --mca rtc_hwloc_vmhole none \
    --mca plm_rsh_agent "$net shell" --mca pml ob1 --mca btl tcp,self \
    -H "${addr[0]},${addr[1]}" -np 2 "$work/latency"
done
