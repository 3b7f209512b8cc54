// MultiWorkerMirroredStrategy: MirroredExtended given a communicator between the worker
// processes. TF_CONFIG's cluster becomes the collective layer's rank, members and rendezvous
// address here; the collective layer knows nothing of task types.
#include "dist/distribute/multi_worker_mirrored_strategy.h"

#include <algorithm>

#include "collective/factory.h"
#include "dist/distribute/cluster_resolver.h"
#include "dist/distribute/mirrored_strategy.h"
#include "distribute/strategies/mirrored_extended.h"
#include "distribute/strategies/worker_cores.h"

namespace dist {
namespace {

MirroredOptions local_options(const MultiWorkerOptions& options) {
  DIST_CHECK_ARG(options.replicas_per_worker >= 1, "replicas_per_worker must be at least 1, got ",
                 options.replicas_per_worker);
  DIST_CHECK_ARG(
      options.communication.implementation != CommunicationOptions::Implementation::kNccl,
      "CommunicationOptions::Implementation::kNccl needs GPUs; this build of distribute runs on "
      "CPUs only: use kAuto or kRing (Gloo over TCP)");
  DIST_CHECK_ARG(
      !options.communication.communication_hook || options.communication.overlap_with_backward,
      "the communication hook '", options.communication.communication_hook->name(),
      "' needs CommunicationOptions::overlap_with_backward (hooks reduce each pack as "
      "backward produces it); set it to true, or drop the hook to accumulate gradients "
      "over several backward passes");
  DIST_CHECK_ARG(options.communication.timeout.count() > 0,
                 "communication timeout must be positive");
  DIST_CHECK_ARG(options.communication.rendezvous_timeout.count() > 0,
                 "rendezvous timeout must be positive");
  MirroredOptions local;
  for (int r = 0; r < options.replicas_per_worker; ++r)
    local.devices.push_back("cpu:" + std::to_string(r));
  local.threads_per_replica = options.threads_per_replica;
  local.bytes_per_pack = options.communication.bytes_per_pack;
  local.collective_timeout = options.communication.timeout;
  local.communication_hook = options.communication.communication_hook;
  local.min_compressed_pack_bytes = options.communication.min_compressed_pack_bytes;
  DIST_CHECK_ARG(options.sharding == Sharding::kNone || options.communication.overlap_with_backward,
                 "sharding '", to_string(options.sharding),
                 "' needs CommunicationOptions::overlap_with_backward (each pack is "
                 "reduce-scattered as backward produces it); set it to true, or use "
                 "Sharding::kNone to accumulate gradients over several backward passes");
  local.sharding = options.sharding;
  local.sharding_reuse_bytes = options.sharding_reuse_bytes;
  return local;
}

// The members of the group: the cluster's workers, or those of the elastic generation.
void add_members(const ClusterConfig& config, const std::optional<WorkerGeneration>& generation,
                 collective::ProcessGroupSpec& spec) {
  spec.rank = -1;
  for (const auto& task : config.cluster.collective_tasks()) {
    const std::string name = task.name();
    if (generation && std::find(generation->members.begin(), generation->members.end(), name) ==
                          generation->members.end())
      continue;
    if (name == config.task.name()) spec.rank = static_cast<int>(spec.members.size());
    spec.members.push_back({name, config.cluster.address(task)});
  }
  if (!generation) return;
  DIST_CHECK_ARG(spec.members.size() == generation->members.size(),
                 "WorkerGeneration::members names a task that is not a worker of the cluster");
  DIST_CHECK_ARG(spec.rank >= 0, "this task, ", config.task.name(),
                 ", is not a member of elastic generation ", generation->number);
  spec.elastic_generation = generation->number;
}

collective::ProcessGroupSpec process_group(const ClusterConfig& config,
                                           const std::optional<WorkerGeneration>& generation,
                                           const CommunicationOptions& communication) {
  collective::ProcessGroupSpec spec;
  add_members(config, generation, spec);
  // The job's one store stays where its first generation's chief started it.
  spec.store_address = config.cluster.store_address();
  spec.rendezvous = rendezvous_address_or_environment(communication.rendezvous,
                                                      "CommunicationOptions::rendezvous");
  spec.collective_timeout = communication.timeout;
  spec.rendezvous_timeout = communication.rendezvous_timeout;
  spec.check_collectives = communication.check_collectives;
  spec.same_host_shared_memory =
      communication.implementation == CommunicationOptions::Implementation::kAuto;
  if (communication.job_token.empty()) {
    spec.job_token = job_token_from_environment();
  } else {
    check_job_token(communication.job_token, "CommunicationOptions::job_token");
    spec.job_token = communication.job_token;
  }
  spec.job_id = communication.job_id.empty() ? job_id_from_environment() : communication.job_id;
  return spec;
}

std::shared_ptr<StrategyExtended> make_extended(const MultiWorkerOptions& options,
                                                const ClusterConfig& config) {
  MirroredOptions local = local_options(options);  // checks the options before connecting
  if (local.threads_per_replica == 0) {
    local.threads_per_replica = detail::default_threads_per_replica(
        options.replicas_per_worker, detail::workers_on_host(config), available_cores(),
        detail::allowed_cores());
  }
  return std::make_shared<MirroredExtended>(
      "multi_worker", std::move(local),
      collective::make_process_communicator(
          options.communication.backend,
          process_group(config, options.generation, options.communication)),
      options.communication.overlap_with_backward, options.communication.share_variables_on_host);
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(MultiWorkerOptions{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerOptions options)
    : MultiWorkerMirroredStrategy(options,
                                  options.cluster ? *options.cluster : resolve_cluster().config) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerOptions& options,
                                                         const ClusterConfig& config)
    : Strategy(make_extended(options, config)), task_(config.task) {}

}  // namespace dist
