#include "distribute/step/optimizer_slots.h"

#include <c10/util/string_utils.h>

#include "core/optimizer_kinds.h"
#include "dist/core/error.h"

namespace dist::detail {
namespace {

std::string state_key(const void* impl) { return c10::guts::to_string(impl); }

}  // namespace

const OptimizerKind& listed_kind(const OptimizerWithKind& optimizer) {
  if (optimizer.kind != nullptr) return *optimizer.kind;
  throw InvalidArgument(concat("checkpoints can save the state of LibTorch's ",
                               optimizer_kind_names(),
                               " optimizers; this optimizer is none of them"));
}

ParameterSlots export_slots(const OptimizerWithKind& with) {
  const OptimizerKind& kind = listed_kind(with);
  const auto& state = with.optimizer.state();
  ParameterSlots out;
  for (const auto& group : with.optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = state.find(state_key(p.unsafeGetTensorImpl()));
      if (it == state.end()) continue;
      out.emplace_back(p.unsafeGetTensorImpl(), kind.get(*it->second));
    }
  }
  return out;
}

void check_slots(const OptimizerWithKind& with, const ParameterSlots& slots,
                 const std::function<std::string(const void*)>& name_of,
                 const std::function<void(const std::string&)>& fail,
                 const std::function<std::vector<int64_t>(const at::Tensor&)>& sizes_of) {
  const OptimizerKind& kind = listed_kind(with);
  std::map<const void*, at::Tensor> params;
  for (const auto& group : with.optimizer.param_groups())
    for (const auto& p : group.params()) params[p.unsafeGetTensorImpl()] = p;
  for (const auto& [impl, named] : slots) {
    if (named.empty()) continue;
    const std::string parameter = name_of(impl);
    const at::Tensor& param = params.at(impl);
    const std::vector<int64_t> sizes = sizes_of ? sizes_of(param) : param.sizes().vec();
    for (const auto& [name, t] : named) {
      const SlotSpec* spec = nullptr;
      for (const auto& s : kind.slots)
        if (name == s.name) spec = &s;
      if (spec == nullptr)
        fail(concat("optimizer slot '", name, "' of parameter ", parameter, " is unknown to ",
                    kind.name));
      const bool ok = spec->is_step ? t.dim() == 0 && t.scalar_type() == at::kLong
                                    : t.sizes() == sizes && t.scalar_type() == param.scalar_type();
      if (!ok)
        fail(concat("optimizer slot '", name, "' of parameter ", parameter, " is ", t.sizes(), " ",
                    t.scalar_type(), " but the parameter is ", at::IntArrayRef(sizes), " ",
                    param.scalar_type()));
    }
    for (const auto& s : kind.slots)
      if (s.required && named.count(s.name) == 0)
        fail(concat("optimizer slot '", s.name, "' of parameter ", parameter, " is missing"));
  }
}

void import_slots(const OptimizerWithKind& with, const ParameterSlots& slots) {
  const OptimizerKind& kind = listed_kind(with);
  auto& state = with.optimizer.state();
  for (const auto& [impl, named] : slots) {
    if (named.empty()) {
      state.erase(state_key(impl));
    } else {
      std::map<std::string, at::Tensor> owned;
      for (const auto& [name, t] : named) owned[name] = t.clone();
      state[state_key(impl)] = kind.make(owned);
    }
  }
}

std::string state_key_of(const at::Tensor& param) { return state_key(param.unsafeGetTensorImpl()); }

}  // namespace dist::detail
