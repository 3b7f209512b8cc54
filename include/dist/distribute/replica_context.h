// ReplicaContext: what a step function sees while it runs as one replica.
//
// Inside strategy.run(fn, ...), each replica's thread has a current ReplicaContext:
// get_replica_context() returns it, and mirrored models, optimizers, losses and metrics use it
// to find this replica's copy. Outside run() (cross-replica context) it returns nullptr.
//
// Every collective here must be called by every replica of the sync group, in the same order,
// with tensors of the same shapes; otherwise the strategy reports an error naming the replica.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/reduce_op.h"

namespace dist {

class StrategyExtended;
namespace collective {
class Communicator;
}
namespace detail {
struct AllReduceGradient;
}

class ReplicaContext {
 public:
  // Made by strategies. `group`: this replica's member of the sync group (its rank is the
  // replica's id in the group); `local_replica_id`: its index among this process's replicas.
  ReplicaContext(std::shared_ptr<const StrategyExtended> strategy, collective::Communicator* group,
                 int local_replica_id, int64_t global_batch_size);

  // 0-based position of this replica in the sync group (across all workers).
  int replica_id_in_sync_group() const;
  // 0-based position of this replica among the replicas of this process.
  int local_replica_id() const { return local_replica_id_; }
  int num_replicas_in_sync() const;
  // Examples in the global batch of the current step, or -1 when the step's arguments did not
  // come from a distributed dataset.
  int64_t global_batch_size() const { return global_batch_size_; }

  // Differentiable for SUM and MEAN, as in tf.distribute: for a value that requires a
  // gradient, backward all-reduces the result's gradient the same way (every replica must
  // then run backward through it, inside the same run()); such values are reduced one
  // collective each. MAX and MIN have no gradient: backward through them is an
  // InvalidArgument. The gradient is not itself differentiable (no second derivatives
  // through it). A collective inside backward is legal under every strategy (docs/design.md,
  // "Collectives inside forward and backward").
  at::Tensor all_reduce(ReduceOp op, const at::Tensor& value);
  std::vector<at::Tensor> all_reduce(ReduceOp op, const std::vector<at::Tensor>& values);
  std::map<std::string, at::Tensor> all_reduce(ReduceOp op,
                                               const std::map<std::string, at::Tensor>& values);
  // Every replica's `value` concatenated along `axis` in replica order; shapes may differ
  // along `axis` only.
  at::Tensor all_gather(const at::Tensor& value, int64_t axis = 0);
  // Pauses all replicas, runs fn once per process (replica 0's) in cross-replica context,
  // then resumes them.
  void merge_call(const std::function<void()>& fn);

  // The strategy whose run() made this context.
  const StrategyExtended* strategy() const { return strategy_.get(); }
  const std::shared_ptr<const StrategyExtended>& shared_strategy() const { return strategy_; }

 private:
  friend struct detail::AllReduceGradient;

  std::shared_ptr<const StrategyExtended> strategy_;
  collective::Communicator* group_;
  int local_replica_id_;
  int64_t global_batch_size_;
};

// The current thread's replica context, or nullptr in cross-replica context.
ReplicaContext* get_replica_context();

// True when the current thread runs a replica of a group of more than one replica.
bool in_multi_replica_context();

// Makes `context` current on this thread for its lifetime (used by strategies), restoring the
// previous one afterwards; pass nullptr to enter cross-replica context.
class ReplicaContextScope {
 public:
  explicit ReplicaContextScope(ReplicaContext* context);
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  ReplicaContext* previous_;
};

}  // namespace dist
