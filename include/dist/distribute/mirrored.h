// Mirrored<M>: a model made through a strategy, with one copy per local replica.
//
//   auto model = strategy.mirror(make_tutorial_cnn());
//   strategy.run([&](const Element& b) { auto logits = model->forward(b[0]); ... }, batch);
//
// `model->` resolves to the copy of the replica whose step is running on this thread, and to
// the primary copy (replica 0) in cross-replica code. The strategy keeps all copies identical
// after every step (see apply_gradients in mirrored_optimizer.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dist/core/error.h"
#include "dist/core/replica_context.h"

namespace dist {

class StrategyExtended;

namespace detail {

// The untyped state behind Mirrored<M>: the replica copies and the strategy that made them.
struct MirroredVariables {
  std::vector<std::shared_ptr<torch::nn::Module>> replicas;  // [0] is the primary
  std::shared_ptr<StrategyExtended> strategy;
  // State the strategy keeps per model (MultiWorkerMirroredStrategy's gradient reducer, whose
  // hooks sit on the copies' parameters). Declared last so it goes first.
  std::shared_ptr<void> strategy_state;

  // Index of the copy the calling thread should use.
  size_t current_index() const {
    const ReplicaContext* context = get_replica_context();
    size_t index = context ? static_cast<size_t>(context->local_replica_id()) : 0;
    DIST_CHECK_ARG(index < replicas.size(), "this model was mirrored for ", replicas.size(),
                   " replicas but is used by replica ", index,
                   "; create the model with the strategy that runs it");
    return index;
  }
};

// Clears gradients for the next step by zeroing them in place rather than freeing them:
// backward then accumulates into the same buffers, and large gradient buffers are not
// returned to and re-requested from the OS (mmap/munmap and page faults) on every step.
inline void clear_gradients(const std::vector<at::Tensor>& params) {
  for (const auto& p : params) {
    at::Tensor grad = p.grad();
    if (grad.defined()) grad.detach().zero_();
  }
}

}  // namespace detail

template <class M>  // M: a torch::nn::ModuleHolder such as torch::nn::Sequential
class Mirrored {
 public:
  using Impl = typename M::ContainedType;

  explicit Mirrored(std::shared_ptr<detail::MirroredVariables> variables)
      : variables_(std::move(variables)) {
    for (const auto& module : variables_->replicas) {
      auto typed = std::dynamic_pointer_cast<Impl>(module);
      DIST_INTERNAL_ASSERT(typed != nullptr, "replica copy has the wrong module type");
      copies_.emplace_back(std::move(typed));
    }
  }

  // This replica's copy (the primary outside run()).
  Impl* operator->() const { return copies_[variables_->current_index()].ptr().get(); }
  Impl& operator*() const { return *operator->(); }
  M& local() { return copies_[variables_->current_index()]; }

  // The copy cross-replica code reads: after a step it equals every other copy.
  const M& primary() const { return copies_.front(); }
  const std::vector<M>& replicas() const { return copies_; }
  int num_replicas() const { return static_cast<int>(copies_.size()); }

  // Sets training or evaluation mode on every copy.
  void train(bool on = true) {
    for (auto& copy : copies_) copy->train(on);
  }
  void eval() { train(false); }

  detail::MirroredVariables& variables() const { return *variables_; }
  const std::shared_ptr<detail::MirroredVariables>& shared_variables() const { return variables_; }

 private:
  std::shared_ptr<detail::MirroredVariables> variables_;
  std::vector<M> copies_;
};

}  // namespace dist
