// The per-parameter state ("slots") of LibTorch's optimizers as named tensors, for checkpoints.
// LibTorch keys an optimizer's state by the parameter's TensorImpl address; a checkpoint names
// slots by parameter name instead, so they restore into any process.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

namespace dist::detail {

struct OptimizerKind;      // core/optimizer_kinds.h
struct OptimizerWithKind;  // core/optimizer_kinds.h

using ParameterSlots = std::vector<std::pair<const void*, std::map<std::string, at::Tensor>>>;

// Every function here takes the optimizer with its kind (core/optimizer_kinds.h), found where
// the walk over its state starts, and refuses one of a kind the table does not list by name.

// Each parameter that has state, by TensorImpl, with its slots ("step" is a 0-dim int64).
ParameterSlots export_slots(const OptimizerWithKind& optimizer);

// Calls fail(message) if a slot is unknown for this optimizer, a required one is missing, or a
// shape or dtype is wrong. A parameter with no slots has no state yet. `sizes_of`: a
// parameter's shape, where a strategy may hold it released (Sharding::kParameters); its own
// shape if null.
void check_slots(const OptimizerWithKind& optimizer, const ParameterSlots& slots,
                 const std::function<std::string(const void*)>& name_of,
                 const std::function<void(const std::string&)>& fail,
                 const std::function<std::vector<int64_t>(const at::Tensor&)>& sizes_of = nullptr);

// Replaces the optimizer's state with copies of `slots` (already checked).
void import_slots(const OptimizerWithKind& optimizer, const ParameterSlots& slots);

// The key of `param`'s state in an optimizer's state().
std::string state_key_of(const at::Tensor& param);

// The optimizer's kind ("SGD", "Adam", "AdamW", "RMSprop" or "Adagrad"); InvalidArgument for
// an optimizer of any kind the table does not list.
const OptimizerKind& listed_kind(const OptimizerWithKind& optimizer);

}  // namespace dist::detail
