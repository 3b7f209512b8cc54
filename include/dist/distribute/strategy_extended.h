// StrategyExtended: the interface each distribution strategy implements.
//
// Users hold a Strategy (strategy.h), a cheap handle; the handle's templates (run, mirror,
// mirror_optimizer) turn typed calls into the untyped virtual calls below. To add a strategy,
// implement this class and give it a Strategy subclass whose constructor makes the impl.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "dist/core/device_name.h"
#include "dist/core/per_replica.h"
#include "dist/core/reduce_op.h"
#include "dist/data/dataset.h"
#include "dist/distribute/auto_shard_policy.h"

namespace dist {

namespace detail {
struct MirroredVariables;
}

class StrategyExtended {
 public:
  virtual ~StrategyExtended() = default;

  // "default", "one_device", "mirrored", ...
  virtual std::string name() const = 0;
  // Replicas across all workers that take part in each step.
  virtual int num_replicas_in_sync() const = 0;
  // Devices of this process's replicas, in local replica order.
  virtual const std::vector<DeviceName>& local_devices() const = 0;
  int num_local_replicas() const { return static_cast<int>(local_devices().size()); }
  // Global replica id of this process's first replica (non-zero only under multi-worker).
  virtual int first_replica_id() const { return 0; }
  // Input pipelines of the job (one per worker process) and this process's index.
  virtual int num_input_pipelines() const { return 1; }
  virtual int input_pipeline_id() const { return 0; }

  // Runs body(local_replica) once per local replica, each with its ReplicaContext current,
  // and returns when all are done. The first exception of any replica is rethrown.
  virtual void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) = 0;

  // Cross-replica reduction of one value per local replica (and, under multi-worker, across
  // workers). With an axis, also reduces along that axis.
  virtual at::Tensor reduce(ReduceOp op, const std::vector<at::Tensor>& values,
                            std::optional<int64_t> axis);
  // Concatenation of the values of all replicas along axis.
  virtual at::Tensor gather(const std::vector<at::Tensor>& values, int64_t axis);

  // Makes the per-replica copies of a model created "in scope". Returns one module per local
  // replica; element 0 is the primary (the copy cross-replica code sees).
  virtual std::shared_ptr<detail::MirroredVariables> mirror_module(
      std::shared_ptr<torch::nn::Module> primary) = 0;

  // Applies gradients accumulated by backward() on every replica's copy with one optimizer
  // step, so that all copies stay identical, then clears the gradients. Called from every
  // replica inside run(), or once from cross-replica code.
  virtual void apply_gradients(detail::MirroredVariables& variables,
                               torch::optim::Optimizer& optimizer) = 0;

  // This process's per-replica shares of one global batch (see batch_split.h): under
  // multi-worker, the rows of this worker's replicas (policy kData/kAuto) or the whole batch
  // (kOff).
  virtual PerReplica<data::Element> distribute_batch(const data::Element& global_batch,
                                                     AutoShardPolicy policy) const;

  // Agreement before each step of a distributed dataset: whether any worker still has data,
  // and the total number of examples all workers will process in the step. One process:
  // (has_data, local_examples).
  // True on every worker if `local` is true on any (a collective across workers).
  virtual bool any_worker(bool local) const { return local; }
  virtual std::pair<bool, int64_t> agree_step(bool has_data, int64_t local_examples) const {
    return {has_data, local_examples};
  }

  // Local part of reduce(): combines values (and along axis); `count` receives the number of
  // values (or of elements along axis) that MEAN divides by.
  static at::Tensor reduce_locally(ReduceOp op, const std::vector<at::Tensor>& values,
                                   std::optional<int64_t> axis, int64_t* count);
};

}  // namespace dist
