// HierarchicalCommunicator: the collectives of replicas spread over processes, composed from
// an in-process group (local/) and a communicator between the processes (gloo/, ...).
//
// This is the one place where "reduce in process, then across processes, then hand back"
// lives. Every collective runs its local stage among the replica threads of the process; the
// thread that completes the local stage runs the cross-process stage once, on the local
// result, while the other replicas wait; then every replica reads the global result. So each
// process issues exactly one cross-process call per collective, from one thread at a time, in
// the order its replicas called the collectives, which is the same order on every process.
// Gloo pairs calls by that order; nothing else is needed to keep processes in step.
//
// Callers that issue cross-process work themselves (cross-replica code, a gradient reducer
// that sends packs as backward produces them) use cross_process(); HierarchicalGroup
// serializes those calls with the collectives' stages. The caller is responsible for issuing
// them at the same point of the program on every process.
//
// Ranks: replica l of process p is rank p * L + l of P * L (L replicas per process, the same
// on every process).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/local/local_group.h"

namespace dist::collective {

class HierarchicalGroup : public std::enable_shared_from_this<HierarchicalGroup> {
 public:
  // `collective_thread`: the cross-process collectives run on a thread of their own
  // (collective_thread.h), so a caller can start one and compute meanwhile; else they run in
  // the calling thread, behind a mutex.
  HierarchicalGroup(const LocalGroupOptions& local, std::unique_ptr<Communicator> cross_process,
                    bool collective_thread = false);

  int local_size() const { return local_->size(); }
  int num_processes() const { return cross_->size(); }
  int process_rank() const { return cross_->rank(); }

  // The communicator of local replica `local_rank` (one per replica thread).
  std::unique_ptr<Communicator> member(int local_rank);
  // Process-level collectives, serialized with the collectives' cross-process stages.
  Communicator& cross_process() { return *ordered_; }
  LocalGroup& local() { return *local_; }

  // Runs in the thread that issues a collective's cross-process stage, before it issues. A
  // gradient reducer that sends packs on its own uses it to send the step's packs first
  // (set once, before any collective).
  void set_before_cross_stage(std::function<void()> fn) { before_cross_stage_ = std::move(fn); }

 private:
  // cross_process(), after before_cross_stage_.
  Communicator& cross_stage();

  friend class HierarchicalCommunicator;
  std::shared_ptr<LocalGroup> local_;
  std::unique_ptr<Communicator> cross_;
  std::unique_ptr<Communicator> ordered_;  // cross_ behind a mutex, or on its thread
  std::vector<std::string> exchanged_;     // written by exchange's completing thread
  std::function<void()> before_cross_stage_;
};

class HierarchicalCommunicator : public Communicator {
 public:
  HierarchicalCommunicator(std::shared_ptr<HierarchicalGroup> group, int local_rank);

  int rank() const override;
  int size() const override;
  std::string member_name(int rank) const override;

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle all_reduce_to_process_leader(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override;
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle barrier() override;
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override;
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override;
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override;

 private:
  int cross_tag(int tag, int local_from, int local_to) const;

  std::shared_ptr<HierarchicalGroup> group_;
  int local_rank_;
};

}  // namespace dist::collective
