#include "distribute/strategies/worker_cores.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>

#include "dist/distribute/mirrored_strategy.h"

namespace dist::detail {

int workers_on_host(const ClusterConfig& config) {
  const std::string host = config.cluster.address(config.task).host;
  int count = 0;
  for (const auto& task : config.cluster.collective_tasks())
    if (config.cluster.address(task).host == host) ++count;
  return std::max(1, count);
}

int default_threads_per_replica(int replicas, int workers_on_host, int host_cores,
                                int allowed_cores) {
  replicas = std::max(1, replicas);
  const bool bound = allowed_cores > 0 && allowed_cores < host_cores;
  const int cores = bound ? allowed_cores : host_cores / std::max(1, workers_on_host);
  return std::max(1, cores / replicas);
}

int usable_cores() {
  const int allowed = allowed_cores();
  return allowed > 0 ? allowed : available_cores();
}

bool intra_op_threads_chosen() {
  for (const char* name : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return at::get_num_threads() != at::intraop_default_num_threads();
}

int set_default_intra_op_threads(int requested, int fallback) {
  int threads = requested;
  if (threads <= 0) {
    if (intra_op_threads_chosen()) return at::get_num_threads();
    threads = std::max(1, fallback);
  }
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
  return threads;
}

}  // namespace dist::detail
