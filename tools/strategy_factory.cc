#include "strategy_factory.h"

#include <algorithm>
#include <iostream>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/parameter_server_strategy.h"

namespace dist::tools {

namespace {

// Roles from TF_CONFIG. Every task of the job may share this host (dist-launch): each takes
// its share of the cores unless --threads says otherwise.
Strategy make_parameter_server_strategy(const TrainOptions& options) {
  ParameterServerOptions ps;
  ps.cluster = cluster_config_from_environment();
  // The evaluator waits for the chief's checkpoints; without them it would wait in vain.
  DIST_CHECK_ARG(ps.cluster->cluster.num_tasks("evaluator") == 0 || !options.checkpoint_dir.empty(),
                 "the cluster has an evaluator task, which evaluates the checkpoints the chief "
                 "writes: give every task the same --checkpoint-dir");
  ps.rpc_timeout = whole_milliseconds("--collective-timeout", options.collective_timeout);
  ps.coordinator_timeout = ps.rpc_timeout;
  ps.startup_timeout = whole_milliseconds("--rendezvous-timeout", options.rendezvous_timeout);
  set_parameter_server_task_threads(options, *ps.cluster);
  return ParameterServerStrategy(ps);
}

}  // namespace

void set_parameter_server_task_threads(const TrainOptions& options, const ClusterConfig& cluster) {
  int tasks_here = 0;
  const std::string host = cluster.cluster.address(cluster.task).host;
  for (const auto& [type, addresses] : cluster.cluster.jobs())
    for (size_t i = 0; i < addresses.size(); ++i)
      if (cluster.cluster.address(TaskSpec{type, static_cast<int>(i)}).host == host) ++tasks_here;
  torch::set_num_threads(options.threads > 0 ? options.threads
                                             : std::max(1, available_cores() / tasks_here));
}

int64_t parameter_server_steps_per_epoch(const TrainOptions& options, int64_t num_train,
                                         int64_t global_batch) {
  return options.steps_per_epoch > 0 ? options.steps_per_epoch
                                     : (num_train + global_batch - 1) / global_batch;
}

namespace {

Strategy make_mirrored_strategy(const TrainOptions& options) {
  MirroredOptions mirrored;
  const int replicas = options.replicas > 0 ? options.replicas : available_cores();
  for (int r = 0; r < replicas; ++r) mirrored.devices.push_back("cpu:" + std::to_string(r));
  mirrored.threads_per_replica = options.threads;
  const bool central = options.strategy == StrategyKind::kCentralStorage;
  if (central) mirrored.cross_device_ops = CrossDeviceOps::kReductionToOneDevice;
  if (options.cross_device_ops) mirrored.cross_device_ops = *options.cross_device_ops;
  mirrored.communication_hook = options.communication_hook;
  mirrored.min_compressed_pack_bytes = options.min_compressed_pack_bytes;
  mirrored.sharding = options.sharding;
  mirrored.sharding_reuse_bytes = options.sharding_reuse_bytes;
  if (central) return CentralStorageStrategy(mirrored);
  return MirroredStrategy(mirrored);
}

// The job's strategy, or an elastic job's generation's (made from multi_worker_options, given
// to run_elastic).
Strategy make_multi_worker_strategy(const TrainOptions& options, ElasticContext* elastic) {
  MultiWorkerOptions multi = multi_worker_options(options);  // its flags checked first
  // Resolved here to say where the cluster came from (TF_CONFIG, Slurm, MPI).
  const ResolvedCluster resolved = resolve_cluster();
  // An elastic job says it once, as it starts (a joiner's generation is a later one).
  if (resolved.config.cluster.collective_rank(resolved.config.task) == 0 &&
      (!elastic || elastic->workers().number == 0))
    std::cout << "Cluster: " << resolved.config.cluster.collective_tasks().size()
              << " workers from " << resolved.source << std::endl;
  if (elastic) return elastic->strategy();
  multi.cluster = resolved.config;
  return MultiWorkerMirroredStrategy(multi);
}

}  // namespace

MultiWorkerOptions multi_worker_options(const TrainOptions& options) {
  MultiWorkerOptions multi;
  multi.replicas_per_worker = options.replicas > 0 ? options.replicas : 1;
  multi.threads_per_replica = options.threads;
  multi.communication.timeout =
      whole_milliseconds("--collective-timeout", options.collective_timeout);
  multi.communication.rendezvous_timeout =
      whole_milliseconds("--rendezvous-timeout", options.rendezvous_timeout);
  multi.communication.check_collectives = options.check_collectives;
  if (options.collective_backend) multi.communication.backend = *options.collective_backend;
  multi.communication.rendezvous = options.rendezvous;
  multi.communication.communication_hook = options.communication_hook;
  multi.communication.min_compressed_pack_bytes = options.min_compressed_pack_bytes;
  multi.sharding = options.sharding;
  multi.sharding_reuse_bytes = options.sharding_reuse_bytes;
  return multi;
}

Strategy make_strategy(const TrainOptions& options, ElasticContext* elastic) {
  check_options(options);
  switch (options.strategy) {
    case StrategyKind::kMirrored:
    case StrategyKind::kCentralStorage:
      return make_mirrored_strategy(options);
    case StrategyKind::kMultiWorker:
      return make_multi_worker_strategy(options, elastic);
    case StrategyKind::kParameterServer:
      return make_parameter_server_strategy(options);
    case StrategyKind::kDefault:
    case StrategyKind::kOneDevice:
      break;
  }
  // LibTorch's own default is one intra-op thread on some machines; a single replica gets
  // every core unless --threads says otherwise. OneDeviceStrategy is told so through its
  // options: it takes a thread count equal to LibTorch's default for no choice at all.
  const int threads = options.threads > 0 ? options.threads : available_cores();
  torch::set_num_threads(threads);
  if (options.strategy == StrategyKind::kDefault) return get_default_strategy();
  OneDeviceOptions one_device;
  one_device.threads = threads;
  return OneDeviceStrategy(one_device);
}

}  // namespace dist::tools
