// SameHostCommunicator: the processes of a job that all run on one host, composed from a
// shared-memory group (shared_memory_group.h) for all_reduce, broadcast, barrier, all_gather
// and reduce_scatter, and a cross-process communicator (Gloo) for the rest (point to point,
// exchange) and for forming the group.
//
// Why: over loopback TCP every byte of a gradient is copied into the kernel and out again by
// both ends, and every collective costs a round trip through Gloo's threads. In shared memory a
// member copies its tensor into its slot once, reduces its share of every slot, and copies the
// results out: the 80 MB gradient of a 20M-parameter MLP no longer crosses a socket, and the
// agreement on each collective (check_collectives) is a read of the peers' control blocks
// instead of a round trip.
//
// Exactness: each element's result is computed once, by the member that owns its share, as
// ((slot 0 op slot 1) op slot 2) ... in rank order, and copied by every member, so all members
// hold the same bits.
//
// Work is done inside the call (the returned Work is complete): the calling thread copies and
// reduces, which is the work Gloo's threads would otherwise do on the same cores.
//
// When the segment cannot be made or mapped on some member (no /dev/shm, too small, members in
// different containers), every member learns it through the inner communicator's exchange
// and all of them use the inner communicator alone (rank 0 warns once).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/shm/shared_memory_group.h"

namespace dist::collective {

class SameHostCommunicator : public Communicator {
 public:
  // `inner` is formed (every member joined). Blocks until every member mapped the segment.
  // Collectives in shared memory always agree on what they are (the check costs no round
  // trip here), whatever ProcessGroupSpec::check_collectives says.
  SameHostCommunicator(std::unique_ptr<Communicator> inner, int64_t slot_bytes,
                       std::chrono::milliseconds timeout);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string member_name(int rank) const override { return inner_->member_name(rank); }
  // Whether collectives go through shared memory (false: the fallback to `inner`).
  bool uses_shared_memory() const { return group_.has_value(); }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override;
  // Each member copies its input into its slot; every member copies every slot out.
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override;
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override;
  // Each member copies its input into its slot and reduces its own chunk from every slot, in
  // rank order (the bits of the shared-memory all_reduce's chunk).
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle barrier() override;
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    return inner_->send(tensor, to, tag);
  }
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override {
    return inner_->recv(tensor, from, tag);
  }
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override {
    return inner_->exchange(key, value);
  }
  // A new segment of `bytes` (member 0 makes it, the others map it by the name it publishes
  // through `inner`). Null on every member when any member cannot map it.
  std::shared_ptr<void> share_memory(int64_t bytes) override;
  void abort(const std::string& reason) override;
  // In shared memory, the calling thread does the work; over the fallback, Gloo's threads do.
  bool completes_in_call() const override { return uses_shared_memory(); }
  const char* backend_name() const override { return inner_->backend_name(); }

 private:
  void wait_for_all(const char* what);
  // The all-gather through the slots, into the flat tensor make_output(shape of the result,
  // the input's rows) returns (called once every member's size is known).
  using GatherOutput =
      std::function<at::Tensor(const std::vector<int64_t>& shape, const at::Tensor& rows)>;
  void gather_through_slots(const at::Tensor& input, const GatherOutput& make_output);
  // After the collective's first barrier: throws a CollectiveError naming what each member
  // issued unless every member published `mine`.
  void check_same_collective(const Fingerprint& mine);
  // Runs `body`; any error marks this communicator failed (and tells the peers).
  template <typename Body>
  void guarded(const std::string& what, Body body);

  std::unique_ptr<Communicator> inner_;
  std::optional<SharedMemoryGroup> group_;
  std::chrono::milliseconds timeout_;
  int64_t sequence_ = 0;
  int64_t regions_shared_ = 0;  // names each share_memory's exchange
  bool failed_ = false;
};

}  // namespace dist::collective
