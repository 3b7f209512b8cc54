// How many intra-op threads a worker process gives each replica by default. Several worker
// processes on one host (dist-launch, mpirun, srun with several tasks per node) share its
// cores; each taking all of them oversubscribes the host, and LibTorch's OpenMP threads then
// spin against each other (measured: 2 workers on 2 cores ran 1.5x slower with 2 threads each
// than with 1).
#pragma once

#include "core/allowed_cores.h"
#include "dist/distribute/cluster_spec.h"

namespace dist::detail {

// The collective tasks (chief and workers) whose address names the same host as `config.task`.
int workers_on_host(const ClusterConfig& config);

// A launcher that bound the process to fewer CPUs than the host has (srun --cpu-bind, mpirun
// --bind-to) already gave it its share: that share is split among its replicas. Otherwise the
// host's cores are split among the workers on the host, then among each one's replicas.
// Never less than 1.
int default_threads_per_replica(int replicas, int workers_on_host, int host_cores,
                                int allowed_cores);

}  // namespace dist::detail
