// The one table of the optimizer kinds the library knows (LibTorch's SGD, Adam, AdamW, RMSprop
// and Adagrad): for each, its slots (checkpoints, OptimizerShards, HostSharedVariables), how
// its per-parameter state is read and made, and its options as named numbers (how an optimizer
// travels to a ps task, which makes one of the same kind). Supporting another optimizer is one
// entry in optimizer_kinds.cc.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

namespace dist::detail {

struct SlotSpec {
  const char* name;
  bool required;
  bool is_step;  // a 0-dim int64 counter rather than a tensor shaped like the parameter
};

// An optimizer's options as named numbers ("lr", "momentum", "beta1", ...; booleans as 0 or 1).
using OptimizerOptionValues = std::map<std::string, double>;

struct OptimizerKind {
  const char* name;
  std::vector<SlotSpec> slots;
  std::function<bool(const torch::optim::Optimizer&)> matches;
  // One parameter's state as slots that alias its tensors, and a state made of slots.
  std::function<std::map<std::string, at::Tensor>(const torch::optim::OptimizerParamState&)> get;
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>(
      const std::map<std::string, at::Tensor>&)>
      make;
  // An optimizer of this kind with `like`'s options and no parameters.
  std::function<std::unique_ptr<torch::optim::Optimizer>(const torch::optim::Optimizer& like)>
      make_empty;
  // The options of a parameter group, read and written as named numbers (names not given
  // keep their value), and an optimizer over `parameters` with such options.
  std::function<OptimizerOptionValues(const torch::optim::OptimizerOptions&)> read_options;
  std::function<void(torch::optim::OptimizerOptions&, const OptimizerOptionValues&)> write_options;
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> parameters,
                                                         const OptimizerOptionValues&)>
      make_over;
};

// The kind named `name` ("SGD", ...), or null: for a name that came without an optimizer (a ps
// task makes its optimizer of the kind an update names).
const OptimizerKind* find_optimizer_kind(const std::string& name);
// Every kind's name, for messages: "SGD, Adam, AdamW, RMSprop and Adagrad".
std::string optimizer_kind_names();

// An optimizer with its kind: how the library's walks over an optimizer's state (a step split
// into shares, a sharded step, a checkpoint's write and read, the ps tasks' slots) get its kind,
// so that reading and making the slots of every parameter and piece on the way goes through
// `kind` instead of finding it again. `kind` is null for an optimizer the table does not list (a
// LossScaleOptimizer's wrapper, a user's own).
struct OptimizerWithKind {
  // The kind is found in the table the first time an optimizer of its class meets the library
  // and remembered by class: a kind is decided by the optimizer's dynamic type (each kind's
  // `matches` is a dynamic_cast), so what is remembered holds for every optimizer of the class,
  // and one made later at a dead one's address is never taken for it.
  explicit OptimizerWithKind(torch::optim::Optimizer& of);
  // An optimizer whose kind is known already (a ps task made it of a kind by name).
  OptimizerWithKind(torch::optim::Optimizer& of, const OptimizerKind* known)
      : optimizer(of), kind(known) {}
  torch::optim::Optimizer& optimizer;
  const OptimizerKind* kind;
};

}  // namespace dist::detail
