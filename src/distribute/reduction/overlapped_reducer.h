// OverlappedReducer: starts each pack's cross-process all-reduce while backward is still
// running (MultiWorkerMirroredStrategy; DDP's bucketed reducer is the model).
//
// A post hook on every replica module's gradient accumulators marks a parameter's gradient
// final (add); at the end of a replica's backward (an autograd final callback, as DDP does)
// its parameters that got no gradient count as zero and are final too, so once every
// replica's backward() has returned, every pack is complete. When all local replicas'
// gradients of a pack are final, the thread that completed it sums them (replica 0 + 1 + ...,
// the order of the in-process reduction) into the pack's flat buffer and, strictly in pack
// order, issues the pack's all-reduce across processes (asynchronous; the processes pair
// calls by issue order, so every process issues the same calls in the same order whatever the
// timing). finalize waits for the packs in order and copies each one's results into replica 0's
// gradients, reporting each pack as it lands (so the strategy may step its parameters while
// later packs are still on their way).
// Sums, order and buffer layout equal the inline reducer's, so the weights are bit-identical
// (with the default all-reduce; a communication hook defines its own result, and is handed each
// pack as a GradientPack: communication_hook.h).
//
// The replicas' own gradients are never written by the reducer, so a step whose backward ran
// without apply_gradients (e.g. inspecting gradients) is simply discarded by settle().
//
// Order of cross-process calls: HierarchicalGroup calls complete_step() before any other
// collective's cross-process stage, and the strategy before its cross-replica collectives,
// so such a collective follows all of the step's packs on every process, even when a replica
// skipped backward.
#pragma once

#include <ATen/core/Tensor.h>

#include "collective/communicator.h"
#include "distribute/reduction/gradient_reducer.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace dist {

namespace collective {
class HierarchicalGroup;
}
class StrategyExtended;

class OverlappedReducer : public GradientReducer {
 public:
  // `params`: [replica][parameter], `names`: parameter names (for errors and communication
  // hooks). Hooks only act inside run() of `owner` (not in cross-replica code). `model`: which
  // of the strategy's models this is (GradientPack::model).
  OverlappedReducer(std::vector<std::vector<at::Tensor>> params, std::vector<std::string> names,
                    std::vector<std::vector<size_t>> packs, collective::HierarchicalGroup* group,
                    const StrategyExtended* owner, PackExchange exchange = {}, int model = 0);
  ~OverlappedReducer() override;
  OverlappedReducer(const OverlappedReducer&) = delete;
  OverlappedReducer& operator=(const OverlappedReducer&) = delete;

  void add(int replica, size_t parameter) override;
  // Parameters whose gradient never came (unused, or an empty replica that skipped backward)
  // count as zero; then, once every local replica is here, replica 0's gradients get the sums.
  // Rethrows a communication failure.
  void finalize(int replica, const PackLanded& landed) override;
  std::vector<std::vector<at::Tensor>> landing_packs() const override;
  void settle() override;
  void complete_step() override;

  // Packs of the last completed step whose gradients were all final during backward (their
  // reduction overlapped it), and the pack count. For tests and benchmarks.
  size_t packs_ready_in_backward() const;
  size_t num_packs() const { return packs_.size(); }

 private:
  // Marks every parameter of `replica` not yet final (zero gradient if none).
  void finish_backward(int replica);
  // With mu_ held: marks every unmarked parameter of `replica` and appends completed packs.
  void mark_rest_locked(int replica, std::vector<size_t>& completed);
  // With mu_ held: marks (replica, param); returns the pack it completed, or -1.
  int64_t mark_locked(int replica, size_t param);
  void reduce_in_process_and_issue(size_t pack);
  // With mu_ held (frees_gradients): frees the buffers of issued packs whose communication is
  // done, waiting for the oldest beyond PackExchange::packs_in_flight.
  void free_sent_buffers_locked();
  // Waits for every pack in order, landing each; `landed` hears of each.
  void write_results(const PackLanded& landed);
  // Copies pack `pack`'s sums into replica 0's gradients.
  void land(size_t pack);
  // The flat buffer of pack `pack` and its GradientPack views, made if it was freed.
  void make_buffer(size_t pack);
  // After the pack landed (PackExchange::frees_gradients).
  void free_buffer(size_t pack);
  // Makes the pack's one gradient its buffer when nothing needs a copy of it (frees_gradients
  // or gradients_in_pack, one replica, one parameter); false otherwise.
  bool send_gradient_itself(size_t pack);
  void reset_step_locked();
  int64_t numel_of(size_t param) const;

  collective::HierarchicalGroup* group_;
  const StrategyExtended* owner_;
  PackExchange exchange_;
  std::vector<std::vector<at::Tensor>> params_;  // [replica][parameter]
  std::vector<std::string> names_;               // parameter names, for errors
  // Each parameter's shape when the reducer was made: stage 3 releases the parameters
  // themselves between their uses (parameter_shards.h).
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<size_t>> packs_;
  std::vector<size_t> pack_of_;               // parameter -> pack
  std::vector<at::Tensor> flat_;              // one buffer per pack, in pack order (or freed)
  std::vector<GradientPack> described_;       // per pack: flat_ as the communication sees it
  std::vector<std::vector<int64_t>> offset_;  // [pack][position] element offset in flat_
  // Kept alive so the hooks stay registered (a variable holds its accumulator weakly).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;

  mutable std::mutex mu_;
  std::vector<std::vector<bool>> final_;      // [replica][parameter]
  std::vector<bool> end_of_backward_queued_;  // per replica, this step
  std::vector<int64_t> missing_;              // per pack: (replica, parameter) marks still to come
  std::vector<bool> reduced_;                 // per pack: summed in process
  std::vector<collective::WorkHandle> issued_;  // packs [0, issued_.size()) are on their way
  bool step_active_ = false;
  int64_t steps_reduced_ = 0;          // steps whose packs all went out and were waited for
  size_t ready_in_backward_ = 0;       // this step
  size_t last_ready_in_backward_ = 0;  // the last step that reached finalize
  std::string accumulated_twice_;      // a parameter whose gradient came twice in one step
};

}  // namespace dist
