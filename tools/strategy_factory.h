// dist-train's strategy factory: the Strategy its flags choose (--strategy, --replicas,
// --threads, the communication and sharding flags), and the parameter-server job's sizes.
#pragma once

#include <cstdint>

#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/strategy.h"
#include "dist/train/elastic.h"
#include "train_options.h"

namespace dist::tools {

// The strategy the options choose (also sets the intra-op thread count where needed).
// `elastic`: an elastic job's generation (multi_worker only), whose strategy it is (made from
// multi_worker_options); null: every worker of the cluster.
Strategy make_strategy(const TrainOptions& options, ElasticContext* elastic = nullptr);

// multi_worker: the strategy's options from the flags, without the cluster (resolved apart).
MultiWorkerOptions multi_worker_options(const TrainOptions& options);

// parameter_server: the steps the chief schedules per epoch: --steps-per-epoch, or one pass of
// the `num_train` examples across all workers (so an epoch means what it means under the other
// strategies). Also what the evaluator task counts to.
int64_t parameter_server_steps_per_epoch(const TrainOptions& options, int64_t num_train,
                                         int64_t global_batch);

// parameter_server: intra-op threads for this task: --threads, or the cores shared evenly by
// the job's tasks on this host (dist-launch puts them all on one).
void set_parameter_server_task_threads(const TrainOptions& options, const ClusterConfig& cluster);

}  // namespace dist::tools
