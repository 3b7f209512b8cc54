// How many intra-op threads a worker process gives each replica by default. Several worker
// processes on one host (dist-launch, mpirun, srun with several tasks per node) share its
// cores; each taking all of them oversubscribes the host, and LibTorch's OpenMP threads then
// spin against each other (measured: 2 workers on 2 cores ran 1.5x slower with 2 threads each
// than with 1). And how many a strategy gives the thread that makes it, unless the user chose.
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

// The cores this process may run on: its affinity mask (allowed_cores()), else the host's.
int usable_cores();

// Whether the user chose the intra-op thread count of the calling thread: OMP_NUM_THREADS or
// MKL_NUM_THREADS is set, or at::set_num_threads gave a count other than LibTorch's default
// (at::intraop_default_num_threads(), one thread on some machines). A call that set exactly
// the default cannot be told from no call; an option of the strategy says it for certain.
bool intra_op_threads_chosen();

// The thread count a strategy gives the thread that makes it (the thread that calls run() under
// OneDeviceStrategy; evaluation and the user's own tensor code under the others), as dist-train
// does: `requested` if positive (an option the user set), else `fallback` unless the user
// chose (intra_op_threads_chosen()). at::set_num_threads acts on the calling thread and on
// every thread that starts its first tensor operation afterwards; it is called only when the
// count changes (it rebuilds thread pools). Returns the count the calling thread then has.
int set_default_intra_op_threads(int requested, int fallback);

}  // namespace dist::detail
