// LocalReplicaGroup: the collectives of replica threads in one process, in shared memory.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "collective/communicator.h"
#include "collective/replica_barrier.h"
#include "dist/core/replica_context.h"
#include "dist/distribute/cross_device_ops.h"

namespace dist::collective {

// Concatenates every worker's `local` along `axis`, in rank order (sizes along axis may differ).
at::Tensor gather_across_workers(Communicator& communicator, const at::Tensor& local, int64_t axis);

class LocalReplicaGroup : public detail::ReplicaGroup {
 public:
  LocalReplicaGroup(int num_replicas, CrossDeviceOps algorithm, std::chrono::milliseconds timeout);

  // Makes this group the local part of a multi-worker group: results of all_reduce and
  // all_gather are combined across workers through `communicator` (not owned), and
  // num_replicas_in_sync() reports `global_replicas`.
  void set_cross_worker(Communicator* communicator, int global_replicas);

  int num_replicas_in_sync() const override { return global_replicas_; }
  int num_local_replicas() const { return barrier_.parties(); }
  // Returns freshly allocated results (each replica its own copy, safe to modify).
  std::vector<at::Tensor> all_reduce(int replica, ReduceOp op,
                                     const std::vector<at::Tensor>& values) override;
  at::Tensor all_gather(int replica, const at::Tensor& value, int64_t axis) override;
  void merge_call(int replica, const std::function<void()>& fn) override;

  // Reduces the replicas' `values` in place into replica 0's tensors (which must be
  // contiguous); other replicas' tensors are left as they were. Then, before anyone returns,
  // runs `after` once (e.g. the optimizer step on replica 0's copy). Used for gradients: no
  // copy is made.
  void all_reduce_into_first(int replica, ReduceOp op, const std::vector<at::Tensor>& values,
                             const std::function<void()>& after = nullptr);

  // Waits for all replicas, then runs `fn` once (in the last arriving thread).
  void barrier(int replica, const char* what, const std::function<void()>& fn = nullptr);

  void abort(const std::string& reason) { barrier_.abort(reason); }
  void reset() { barrier_.reset(); }

 private:
  // Phase 1: every replica posts its inputs; the last one checks that all posted the same
  // collective with the same structure.
  void post(int replica, const char* what, const std::vector<at::Tensor>* values,
            const std::function<void()>& on_complete);
  void check_same_structure() const;
  // Phase 2: reduce into `outputs_` the elements this replica is responsible for.
  void reduce_share(int replica, ReduceOp op);
  void reduce_range(ReduceOp op, size_t tensor, int64_t begin, int64_t end) const;
  size_t partial_groups() const;

  CrossDeviceOps algorithm_;
  ReplicaBarrier barrier_;
  Communicator* cross_worker_ = nullptr;
  int global_replicas_;
  // State of the collective in flight; written in phase 1 by each replica (its own slot) or
  // by the completing thread, read by all after the barrier.
  std::vector<const char*> kinds_;
  std::vector<const std::vector<at::Tensor>*> inputs_;
  std::vector<at::Tensor> outputs_;
  at::Tensor gathered_;
  std::vector<std::vector<at::Tensor>> partials_;        // kHierarchicalCopy group sums
  std::vector<const std::function<void()>*> merge_fns_;  // merge_call functions per replica
};

}  // namespace dist::collective
