// LocalGroup: the collectives of threads of one process (replicas), in shared memory.
//
// One LocalGroup is shared by `size` threads; each calls with its own rank. LocalCommunicator
// (local_communicator.h) is the Communicator view of one rank. The calls block until the
// collective is complete (the members' threads do the arithmetic themselves) and fail every
// member with a CollectiveError naming the missing or mismatching rank.
//
// The `then` argument of the reductions runs once, in one thread, on the reduced result
// before any member reads it: HierarchicalCommunicator puts the cross-process stage there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>

#include "collective/local/replica_barrier.h"
#include "dist/collective/cross_device_ops.h"
#include "dist/core/reduce_op.h"

namespace dist::collective {

struct LocalGroupOptions {
  int size = 1;
  CrossDeviceOps algorithm = CrossDeviceOps::kParallelAllReduce;
  // A member that does not reach a collective within this time fails all of them.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // "replica" -> member names "replica 0", "replica 1", ...
  std::string member_kind = "replica";
  // Where the group is, for messages: " of worker:1 (10.0.0.2:2222)" when it is one process's
  // replicas in a job of several (HierarchicalGroup sets it); empty otherwise.
  std::string place;
};

class LocalGroup {
 public:
  using Stage = std::function<void(std::vector<at::Tensor>& result)>;

  explicit LocalGroup(LocalGroupOptions options);

  int size() const { return barrier_.parties(); }
  std::string member_name(int rank) const;

  // In place: every member's tensors end with the reduction of all.
  void all_reduce(int rank, std::vector<at::Tensor>& tensors, ReduceOp op,
                  const Stage& then = nullptr);
  // In place into rank 0's tensors (contiguous); other members' tensors are left as they were.
  void reduce_to_first(int rank, std::vector<at::Tensor>& tensors, ReduceOp op,
                       const Stage& then = nullptr);
  // Every member ends with root's values; `then` runs on root's tensors before they are read.
  void broadcast(int rank, std::vector<at::Tensor>& tensors, int root, const Stage& then = nullptr);
  // Members' tensors concatenated along `axis` in rank order; shapes may differ along `axis`.
  at::Tensor all_gather(int rank, const at::Tensor& input, int64_t axis,
                        const std::function<at::Tensor(const at::Tensor&)>& then = nullptr);
  // Waits for every member, then runs fn once (in the last arriving thread) before releasing.
  void barrier(int rank, const char* what, const std::function<void()>& fn = nullptr);
  void send(int rank, const at::Tensor& tensor, int to, int tag);
  void recv(int rank, at::Tensor& tensor, int from, int tag);
  std::vector<std::string> exchange(int rank, const std::string& key, const std::string& value);

  // Fails every member blocked in or later entering a collective, until reset().
  void abort(const std::string& reason);
  void reset();

 private:
  void post(int rank, const char* what, const std::vector<at::Tensor>* values,
            const std::function<void()>& on_complete);
  void check_same_kind() const;
  void check_same_structure() const;
  void reduce_share(int rank, ReduceOp op);
  void reduce_range(ReduceOp op, size_t tensor, int64_t begin, int64_t end) const;
  size_t partial_groups() const;

  LocalGroupOptions options_;
  ReplicaBarrier barrier_;
  // The collective in flight; written in phase 1 by each member (its own slot) or by the
  // completing thread, read by all after the barrier.
  std::vector<const char*> kinds_;
  std::vector<const std::vector<at::Tensor>*> inputs_;
  std::vector<at::Tensor> outputs_;
  at::Tensor gathered_;
  std::vector<std::vector<at::Tensor>> partials_;  // kHierarchicalCopy group sums
  std::vector<std::string> exchanged_;

  // Point to point: messages by (from, to, tag), in send order.
  std::mutex mailbox_mu_;
  std::condition_variable mailbox_changed_;
  std::map<std::tuple<int, int, int>, std::vector<at::Tensor>> mailbox_;
  std::string mailbox_abort_;
};

}  // namespace dist::collective
