// One object of a Checkpoint (dist/train/checkpoint.h), as the object graph (checkpoint.cc)
// holds it and the writer and reader (checkpoint_writing.cc, checkpoint_reading.cc) see it, and
// the naming of an optimizer's slots by its model's parameters. Private to src/train.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "core/optimizer_kinds.h"
#include "dist/train/checkpoint.h"
#include "train/checkpoint_format.h"

namespace dist {

// One named object; immutable once added, so copies of a Checkpoint share it.
struct Checkpoint::Object {
  std::string name;
  std::string kind = detail::kModelKind;  // kModelKind, kOptimizerKind, kTensorKind or kHookKind
  std::shared_ptr<torch::nn::Module> module;        // a plain model
  std::shared_ptr<DistributedVariables> variables;  // a model placed by a strategy
  torch::optim::Optimizer* optimizer = nullptr;
  // The optimizer's kind, found once, when it was added.
  const detail::OptimizerKind* optimizer_kind = nullptr;
  std::shared_ptr<MirroredOptimizer> owner;  // keeps a shared optimizer alive
  std::string model;                         // the model of an optimizer
  at::Tensor value;                          // a tensor
  std::shared_ptr<CommunicationHook> hook;   // a communication hook, and its strategy's
  std::shared_ptr<const HookJob> job;
  // Every worker's hook state, from the last gather_worker_states() (the objects are shared
  // and otherwise immutable; this is what the next write() takes).
  std::shared_ptr<std::vector<std::map<std::string, at::Tensor>>> gathered =
      std::make_shared<std::vector<std::map<std::string, at::Tensor>>>();

  // The module saved and restored (a placed model's primary copy).
  std::shared_ptr<torch::nn::Module> saved_module() const {
    return variables != nullptr ? variables->primary() : module;
  }
  // An optimizer with the kind found when it was added, for every write and read after.
  detail::OptimizerWithKind optimizer_with_kind() const { return {*optimizer, optimizer_kind}; }
  // A model whose strategy keeps its parameters in shares: written in pieces.
  bool keeps_shares() const { return variables != nullptr && variables->keeps_shares(); }
};

namespace detail {

// Names of a model's parameters by TensorImpl, to name an optimizer's slots.
class ParameterNames {
 public:
  explicit ParameterNames(const torch::nn::Module& module) {
    for (const auto& p : module.named_parameters())
      names_[p.value().unsafeGetTensorImpl()] = p.key();
  }
  const std::string* find(const void* impl) const {
    auto it = names_.find(impl);
    return it == names_.end() ? nullptr : &it->second;
  }
  bool holds_all(const torch::optim::Optimizer& optimizer) const {
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params())
        if (find(p.unsafeGetTensorImpl()) == nullptr) return false;
    return true;
  }

 private:
  std::map<const void*, std::string> names_;
};

// InvalidArgument unless every parameter of optimizer `name` is one of its model's (`names`):
// its slots are named by them.
void check_optimizer_of(const std::string& name, const torch::optim::Optimizer& optimizer,
                        const std::string& model, const ParameterNames& names);

}  // namespace detail
}  // namespace dist
