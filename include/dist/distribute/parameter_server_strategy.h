// ParameterServerStrategy: asynchronous training with variables on parameter-server tasks
// (tf.distribute.experimental.ParameterServerStrategy with a ClusterCoordinator).
//
// The job: a chief (the coordinator, which runs the training loop), workers, ps tasks and
// optionally an evaluator, all running the same binary with their own TF_CONFIG. Variables
// made with strategy.mirror() live on the ps tasks (round-robin, or split by `partitioner`),
// each with its optimizer slots beside it. A step scheduled on a worker (cluster_coordinator.h)
// reads the current values, computes gradients on the worker's batch and sends them; the ps
// task applies the optimizer (LibTorch's), without waiting for other workers.
//
//   dist::ParameterServerStrategy strategy;                 // TF_CONFIG
//   auto model = strategy.mirror(Net());                    // on the ps tasks
//   auto optimizer = strategy.mirror_optimizer<torch::optim::SGD>(model, SGDOptions(0.1));
//   dist::ClusterCoordinator coordinator(strategy);
//   coordinator.register_function("step", ...);             // on every task, same order
//   if (!strategy.is_chief()) return coordinator.serve();   // ps and workers serve
//   ... coordinator.schedule("step", ...); coordinator.join();
//
// Every server binds only the address its TF_CONFIG entry names. Calls have deadlines: a ps
// task that does not answer within `rpc_timeout` fails the coordinator with a CollectiveError
// naming it; ps and worker tasks that hear nothing from the coordinator for
// `coordinator_timeout` exit by themselves.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/partitioner.h"
#include "dist/distribute/strategy.h"

namespace dist {

struct ParameterServerOptions {
  // The cluster and this task; from TF_CONFIG when not given.
  std::optional<ClusterConfig> cluster;
  // How variables are split into shards (none: each lives whole on one ps task).
  Partitioner partitioner;
  // Every call to another task must be answered within this time.
  std::chrono::milliseconds rpc_timeout = std::chrono::seconds(30);
  // The tasks must all be serving within this time of the coordinator's start.
  std::chrono::milliseconds startup_timeout = std::chrono::minutes(2);
  // A scheduled step must finish within this time, or its worker counts as lost (and the step
  // runs again on another).
  std::chrono::milliseconds step_timeout = std::chrono::minutes(10);
  // A ps or worker task that hears nothing from the coordinator for this long exits (the
  // coordinator pings every task a few times within it).
  std::chrono::milliseconds coordinator_timeout = std::chrono::seconds(60);
};

class ParameterServerStrategy : public Strategy {
 public:
  // InvalidArgument when the cluster has no ps task, no chief, or this task is an evaluator
  // (an evaluator reads checkpoints; it needs no strategy).
  explicit ParameterServerStrategy(ParameterServerOptions options = {});

  // This task's type: "chief", "worker" or "ps".
  const std::string& task_type() const;

  // Tensor bytes this task has sent to and received from the ps tasks so far: values,
  // gradients and row numbers, without message framing. The difference across a step is what
  // the step cost on the wire.
  int64_t bytes_sent() const;
  int64_t bytes_received() const;
};

}  // namespace dist
