#include "distribute/strategies/worker_cores.h"

#include <algorithm>

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

}  // namespace dist::detail
