// Mirrored<M>: a model made through a strategy, typed as the user built it.
//
//   auto model = strategy.mirror(make_tutorial_cnn());
//   strategy.run([&](const Element& b) { auto logits = model->forward(b[0]); ... }, batch);
//
// `model->` resolves to the module of the replica whose step is running on this thread, and
// to the primary module in cross-replica code. Where the variables live is the strategy's
// business (DistributedVariables); the strategy keeps every place identical after each step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "dist/core/error.h"
#include "dist/distribute/distributed_variables.h"

namespace dist {

template <class M>  // M: a torch::nn::ModuleHolder such as torch::nn::Sequential
class Mirrored {
 public:
  using Impl = typename M::ContainedType;

  explicit Mirrored(std::shared_ptr<DistributedVariables> variables)
      : variables_(std::move(variables)) {
    for (int r = 0; r < variables_->num_replicas(); ++r) {
      auto typed = std::dynamic_pointer_cast<Impl>(variables_->replica(r));
      DIST_INTERNAL_ASSERT(typed != nullptr, "replica module has the wrong type");
      copies_.emplace_back(std::move(typed));
    }
    auto primary = std::dynamic_pointer_cast<Impl>(variables_->primary());
    DIST_INTERNAL_ASSERT(primary != nullptr, "primary module has the wrong type");
    primary_.emplace_back(std::move(primary));
  }

  // This replica's module (the primary outside run()).
  Impl* operator->() const {
    const int index = variables_->current_index();
    return (index < 0 ? primary_.front() : copies_[static_cast<size_t>(index)]).ptr().get();
  }
  Impl& operator*() const { return *operator->(); }

  // The module cross-replica code reads: after a step it holds the current values. A holder
  // sharing it (a copy of the holder, not of the module), so that it can be called: forward is
  // not const (model.primary()->forward(x) evaluates in a custom loop).
  M primary() const { return primary_.front(); }
  // The modules of this process's replicas.
  const std::vector<M>& replicas() const { return copies_; }
  int num_replicas() const { return static_cast<int>(copies_.size()); }

  // Sets training or evaluation mode on every replica's module.
  void train(bool on = true) {
    for (auto& copy : copies_) copy->train(on);
    primary_.front()->train(on);
  }
  void eval() { train(false); }

  DistributedVariables& variables() const { return *variables_; }
  const std::shared_ptr<DistributedVariables>& shared_variables() const { return variables_; }

 private:
  std::shared_ptr<DistributedVariables> variables_;
  std::vector<M> copies_;
  std::vector<M> primary_;  // one element (M has no default constructor)
};

}  // namespace dist
