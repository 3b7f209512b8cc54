// ReplicaContext: what a step function sees while it runs as one replica.
//
// Inside strategy.run(fn, ...), each replica's thread has a current ReplicaContext:
// get_replica_context() returns it, and mirrored models, optimizers, losses and metrics use it
// to find this replica's copy. Outside run() (cross-replica context) it returns nullptr.
//
// Every collective here must be called by every replica of the group, in the same order, with
// tensors of the same shapes; otherwise the strategy reports an error naming the replica.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/reduce_op.h"

namespace dist {

namespace detail {

// The collectives of one sync group, implemented by each strategy. Each call is made by every
// local replica (identified by its local index `replica`) and returns that replica's result.
class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  virtual int num_replicas_in_sync() const = 0;
  virtual std::vector<at::Tensor> all_reduce(int replica, ReduceOp op,
                                             const std::vector<at::Tensor>& values) = 0;
  // Concatenates every replica's tensor along `axis`, in replica order.
  virtual at::Tensor all_gather(int replica, const at::Tensor& value, int64_t axis) = 0;
  // Waits for all replicas, runs fn once (in cross-replica context), then releases them all.
  virtual void merge_call(int replica, const std::function<void()>& fn) = 0;
};

}  // namespace detail

class ReplicaContext {
 public:
  // local_replica_id: this replica's index among the replicas of this process (equal to
  // replica_id except under multi-worker strategies); -1 means "same as replica_id".
  ReplicaContext(detail::ReplicaGroup* group, int replica_id, int64_t global_batch_size,
                 int local_replica_id = -1);

  // 0-based position of this replica in the sync group (across all workers).
  int replica_id_in_sync_group() const { return replica_id_; }
  // 0-based position of this replica among the replicas of this process.
  int local_replica_id() const { return local_replica_id_; }
  int num_replicas_in_sync() const;
  // Examples in the global batch of the current step, or -1 when the step's arguments did not
  // come from a distributed dataset.
  int64_t global_batch_size() const { return global_batch_size_; }

  at::Tensor all_reduce(ReduceOp op, const at::Tensor& value);
  std::vector<at::Tensor> all_reduce(ReduceOp op, const std::vector<at::Tensor>& values);
  std::map<std::string, at::Tensor> all_reduce(ReduceOp op,
                                               const std::map<std::string, at::Tensor>& values);
  // Every replica's `value` concatenated along `axis` in replica order; shapes may differ
  // along `axis` only.
  at::Tensor all_gather(const at::Tensor& value, int64_t axis = 0);
  // Pauses all replicas, runs fn once in cross-replica context, then resumes them.
  void merge_call(const std::function<void()>& fn);

  detail::ReplicaGroup* group() const { return group_; }

 private:
  detail::ReplicaGroup* group_;
  int replica_id_;
  int64_t global_batch_size_;
  int local_replica_id_;
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
