// StrategyExtended: the interface each distribution strategy implements.
//
// Users hold a Strategy (strategy.h), a cheap handle; the handle's templates (run, mirror,
// mirror_optimizer) turn typed calls into the untyped virtual calls below. To add a strategy,
// implement every pure virtual here and give it a Strategy subclass whose constructor makes
// the implementation (docs/how-to-extend.md, "A strategy"; docs/design.md, "One training path:
// the strategy runs the steps (StepRunner)").
//
// The duties every strategy has, including multi-process ones, are pure virtual, so a
// strategy cannot forget one and still compile. Cross-worker agreement (any_worker,
// agree_step, metric sums, reduce) is derived from one primitive, all_reduce_across_workers.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "dist/collective/communication_counters.h"
#include "dist/core/device_name.h"
#include "dist/core/per_replica.h"
#include "dist/core/reduce_op.h"
#include "dist/data/auto_shard_policy.h"
#include "dist/data/dataset.h"
#include "dist/distribute/communication_hook.h"
#include "dist/distribute/distributed_variables.h"
#include "dist/distribute/step_runner.h"

namespace dist {

class Strategy;

class StrategyExtended {
 public:
  virtual ~StrategyExtended() = default;

  // ---- what the strategy is ----
  // "default", "one_device", "mirrored", ...
  virtual std::string name() const = 0;
  // Replicas across all workers that take part in each step.
  virtual int num_replicas_in_sync() const = 0;
  // Devices of this process's replicas, in local replica order.
  virtual const std::vector<DeviceName>& local_devices() const = 0;
  int num_local_replicas() const { return static_cast<int>(local_devices().size()); }
  // This strategy object for messages: its name, replicas and address, so that two strategies
  // of one kind are told apart ("strategy 'mirrored' (2 replicas in sync, object 0x5581...)").
  std::string describe() const;

  // ---- workers (the processes that run replicas; 1 for in-process strategies) ----
  virtual int num_workers() const = 0;
  // This process's index among the workers, 0-based.
  virtual int worker_index() const = 0;
  // Whether this process writes what is written once per job (checkpoints, summaries, logs).
  virtual bool is_chief() const = 0;
  // Global replica id of this process's first replica.
  int first_replica_id() const { return worker_index() * num_local_replicas(); }
  // Worker `index` for messages: "worker 1" here; multi-process strategies add the task and
  // address ("worker:1 (10.0.0.2:2222)").
  virtual std::string worker_name(int index) const { return "worker " + std::to_string(index); }

  // ---- failing together ----
  // This worker is failing for `reason` (its data or checkpoint could not be read, a setting
  // is wrong): tell the other workers, so that whatever they wait for fails at once with an
  // error naming this worker and `reason`, instead of at a timeout. Call it before leaving
  // with the exception; the strategy cannot run collectives afterwards. One process: nothing
  // to tell.
  virtual void report_failure(const std::string& reason) = 0;
  // Every worker calls it at the same point with its values of the settings that decide which
  // steps it takes (batch, epochs, seed, the step a resume starts from, ...), by name. Returns
  // if every worker's settings equal the chief's; otherwise throws CollectiveError on every
  // worker, naming the first differing worker and setting with both values.
  void check_workers_agree(const std::vector<std::pair<std::string, std::string>>& settings) const;

  // ---- running replicas ----
  // Runs body(local_replica) once per local replica, each with its ReplicaContext current,
  // and returns when all are done. The first exception of any replica is rethrown.
  virtual void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) = 0;

  // ---- cross-worker agreement, from cross-replica code ----
  // In place: the reduction over every worker's tensors (every worker calls it at the same
  // point; one process: nothing to do). All of the below derive from it.
  virtual void all_reduce_across_workers(std::vector<at::Tensor>& tensors, ReduceOp op) const = 0;
  // Every worker's `local` concatenated along dim 0 in worker order (sizes may differ).
  virtual at::Tensor all_gather_across_workers(const at::Tensor& local) const = 0;
  // What this worker has sent to the others through collectives so far
  // (communication_counters.h); zeros for a strategy that counts nothing.
  virtual CommunicationCounters communication_counters() const { return {}; }
  // The hook gradient packs cross the workers through (communication_hook.h); null: none.
  virtual std::shared_ptr<CommunicationHook> communication_hook() const { return nullptr; }
  // Whether the collectives between the worker processes go through shared memory (every
  // worker on one host) rather than a transport over the network. For start-up logs.
  virtual bool workers_share_memory() const { return false; }

  // True on every worker if `local` is true on any.
  bool any_worker(bool local) const;
  // Agreement before each step of a distributed dataset: whether any worker still has data,
  // and the total number of examples all workers will process in the step.
  std::pair<bool, int64_t> agree_step(bool has_data, int64_t local_examples) const;
  // Element-wise sums over the workers (metric totals and counts).
  std::vector<double> sum_across_workers(const std::vector<double>& local) const;

  // Cross-replica reduction of one value per local replica, across workers too. With an
  // axis, also reduces along that axis.
  at::Tensor reduce(ReduceOp op, const std::vector<at::Tensor>& values,
                    std::optional<int64_t> axis) const;
  // Concatenation of the values of all replicas (of every worker) along axis.
  at::Tensor gather(const std::vector<at::Tensor>& values, int64_t axis) const;

  // This process's per-replica shares of one global batch (batch_split.h): the rows of this
  // worker's replicas (policy kData/kAuto) or the whole batch across the local replicas (kOff).
  PerReplica<data::Element> distribute_batch(const data::Element& global_batch,
                                             AutoShardPolicy policy) const;

  // ---- variables ----
  // Places a model created "in scope" (tf.distribute's strategy.scope()); `primary` becomes
  // the variables' primary module.
  virtual std::shared_ptr<DistributedVariables> create_variables(
      std::shared_ptr<torch::nn::Module> primary) = 0;

  // Applies the gradients backward() left on the variables with one optimizer step (over
  // variables.trainable_variables()), so that every placement holds the same new values,
  // then clears the gradients. Called from every replica inside run() (a collective), or once
  // from cross-replica code.
  virtual void apply_gradients(DistributedVariables& variables,
                               torch::optim::Optimizer& optimizer) = 0;

  // ---- how a training loop's steps run (step_runner.h) ----
  // A runner for `step`; `self` is the handle that owns this implementation. The default runs
  // each step at once on this process's replicas, over its shares of each global batch.
  virtual std::unique_ptr<StepRunner> make_step_runner(const Strategy& self, TrainStep step);
  // What loops must know of how steps run here; the default is the synchronous one.
  virtual StepSchedule step_schedule() const { return {}; }
};

}  // namespace dist
