// OverlappedReducer: starts each pack's cross-worker all-reduce while backward is still
// running (MultiWorkerMirroredStrategy; DDP's bucketed reducer is the model).
//
// A post hook on every replica copy's gradient accumulators marks a parameter's gradient
// final; at the end of a replica's backward (an autograd final callback, as DDP does) its
// parameters that got no gradient count as zero and are final too, so once every replica's
// backward() has returned, every pack is queued. When all local replicas' gradients of a pack
// are final, the thread that completed
// it sums them (replica 0 + 1 + ..., the order of the non-overlapped path) into the pack's
// flat buffer and queues the pack; a communication thread all-reduces queued packs across
// workers strictly in pack order, so every worker issues the same Gloo calls in the same
// order whatever the timing. apply_gradients then waits for the packs and copies the results
// into replica 0's gradients. Sums, order and buffer layout equal the non-overlapped path's,
// so the weights are bit-identical.
//
// The replicas' own gradients are never written by the reducer, so a step whose backward ran
// without apply_gradients (e.g. inspecting gradients) is simply discarded by settle().
//
// Order of Gloo calls: every other cross-worker collective first calls complete_step(), so a
// collective between backward and apply_gradients (an all_reduce of the loss, say) follows
// all of the step's packs on every worker, even when a replica skipped backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace dist {

namespace detail {
struct MirroredVariables;
class ReplicaGroup;
}  // namespace detail

class OverlappedReducer {
 public:
  // Combines one flat pack (in place) across workers; called on the communication thread.
  using CrossWorkerSum = std::function<void(at::Tensor& flat)>;

  // `group`: hooks only act inside a step of this replica group (not in cross-replica code).
  OverlappedReducer(detail::MirroredVariables& variables, const detail::ReplicaGroup* group,
                    std::vector<std::vector<size_t>> packs, CrossWorkerSum cross_worker_sum);
  ~OverlappedReducer();
  OverlappedReducer(const OverlappedReducer&) = delete;
  OverlappedReducer& operator=(const OverlappedReducer&) = delete;

  // In replica `replica`'s thread, in apply_gradients: parameters whose gradient never came
  // (unused, or an empty replica that skipped backward) count as zero and are marked final.
  void finish_backward(int replica);
  // Once per step, after every replica's finish_backward: waits for all packs and writes the
  // reduced gradients into replica 0's .grad tensors. Rethrows a communication failure.
  void write_results();
  // Ends a step that never reached apply_gradients: waits for packs already sent (the other
  // workers sent them too) and forgets the step.
  void settle();
  // Before another cross-worker collective during a step (every local replica is waiting at
  // it): parameters without a final gradient count as final, and every pack is sent.
  void complete_step();

  // Packs of the last completed step whose gradients were all final during backward (their
  // reduction overlapped it), and the pack count. For tests and benchmarks.
  size_t packs_ready_in_backward() const;
  size_t num_packs() const { return packs_.size(); }

 private:
  void on_gradient_final(int replica, size_t param);
  // With mu_ held: marks every unmarked parameter of `replica` (zero gradient if none) and
  // appends the packs that completed.
  void mark_rest_locked(int replica, std::vector<size_t>& completed);
  // With mu_ held: marks (replica, param); returns the pack it completed, or -1.
  int64_t mark_locked(int replica, size_t param);
  void reduce_in_process_and_queue(size_t pack);
  void communication_loop();
  void wait_for_sent_locked(std::unique_lock<std::mutex>& lock);
  void reset_step_locked();

  const detail::ReplicaGroup* group_;
  std::vector<std::vector<at::Tensor>> params_;  // [replica][parameter]
  std::vector<std::string> names_;               // parameter names, for errors
  std::vector<std::vector<size_t>> packs_;
  std::vector<size_t> pack_of_;               // parameter -> pack
  std::vector<at::Tensor> flat_;              // one buffer per pack, in pack order
  std::vector<std::vector<int64_t>> offset_;  // [pack][position] element offset in flat_
  CrossWorkerSum cross_worker_sum_;
  // Kept alive so the hooks stay registered (a variable holds its accumulator weakly).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::vector<bool>> final_;      // [replica][parameter]
  std::vector<bool> end_of_backward_queued_;  // per replica, this step
  std::vector<int64_t> missing_;              // per pack: (replica, parameter) marks still to come
  std::vector<bool> reduced_;                 // per pack: summed in process
  size_t next_to_send_ = 0;                   // packs [0, next_to_send_) are queued or done
  size_t sent_ = 0;                           // packs [0, sent_) are reduced across workers
  bool step_active_ = false;
  size_t ready_in_backward_ = 0;       // this step
  size_t last_ready_in_backward_ = 0;  // the last step that reached write_results
  std::string accumulated_twice_;      // a parameter whose gradient came twice in one step
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::thread communication_;
};

}  // namespace dist
