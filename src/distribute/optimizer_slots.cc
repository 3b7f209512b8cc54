#include "distribute/optimizer_slots.h"

#include <c10/util/string_utils.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <memory>

#include "dist/core/error.h"

namespace dist::detail {
namespace {

using torch::optim::OptimizerParamState;

struct SlotSpec {
  const char* name;
  bool required;
  bool is_step;  // a 0-dim int64 counter rather than a tensor shaped like the parameter
};

// Getting and setting one optimizer's state object through its TORCH_ARG accessors.
struct Kind {
  const char* name;
  std::vector<SlotSpec> slots;
  std::function<bool(const torch::optim::Optimizer&)> matches;
  std::function<std::map<std::string, at::Tensor>(const OptimizerParamState&)> get;
  std::function<std::unique_ptr<OptimizerParamState>(const std::map<std::string, at::Tensor>&)>
      make;
  std::function<std::unique_ptr<torch::optim::Optimizer>(const torch::optim::Optimizer&)>
      make_empty;
};

at::Tensor step_tensor(int64_t step) { return at::scalar_tensor(step, at::kLong); }
int64_t step_value(const std::map<std::string, at::Tensor>& s) {
  return s.at("step").item<int64_t>();
}
// Aliases the tensor: import_slots copies the slots before it makes a state of them, and
// OptimizerShards wants views of the tensors it is given.
at::Tensor slot(const std::map<std::string, at::Tensor>& s, const char* name) {
  auto it = s.find(name);
  return it == s.end() ? at::Tensor() : it->second;
}
void put(std::map<std::string, at::Tensor>& out, const char* name, const at::Tensor& t) {
  if (t.defined()) out[name] = t.detach();
}

template <class Optimizer>
bool is(const torch::optim::Optimizer& o) {
  return dynamic_cast<const Optimizer*>(&o) != nullptr;
}

// Without parameters, so no optimizer makes state for them (Adagrad does in its constructor).
template <class Optimizer, class Options>
std::unique_ptr<torch::optim::Optimizer> empty(const torch::optim::Optimizer& like) {
  return std::make_unique<Optimizer>(std::vector<torch::optim::OptimizerParamGroup>{},
                                     static_cast<const Options&>(like.defaults()));
}

// Adam and AdamW share their slots.
template <class Optimizer, class Options, class State>
Kind adam_like(const char* name) {
  return {name,
          {{"step", true, true},
           {"exp_avg", true, false},
           {"exp_avg_sq", true, false},
           {"max_exp_avg_sq", false, false}},
          is<Optimizer>,
          [](const OptimizerParamState& base) {
            const auto& s = static_cast<const State&>(base);
            std::map<std::string, at::Tensor> out{{"step", step_tensor(s.step())}};
            put(out, "exp_avg", s.exp_avg());
            put(out, "exp_avg_sq", s.exp_avg_sq());
            put(out, "max_exp_avg_sq", s.max_exp_avg_sq());
            return out;
          },
          [](const std::map<std::string, at::Tensor>& in) {
            auto s = std::make_unique<State>();
            s->step(step_value(in));
            s->exp_avg(slot(in, "exp_avg"));
            s->exp_avg_sq(slot(in, "exp_avg_sq"));
            s->max_exp_avg_sq(slot(in, "max_exp_avg_sq"));
            return s;
          },
          empty<Optimizer, Options>};
}

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> all = [] {
    std::vector<Kind> k;
    k.push_back({"SGD",
                 {{"momentum_buffer", false, false}},
                 is<torch::optim::SGD>,
                 [](const OptimizerParamState& base) {
                   std::map<std::string, at::Tensor> out;
                   put(out, "momentum_buffer",
                       static_cast<const torch::optim::SGDParamState&>(base).momentum_buffer());
                   return out;
                 },
                 [](const std::map<std::string, at::Tensor>& in) {
                   auto s = std::make_unique<torch::optim::SGDParamState>();
                   s->momentum_buffer(slot(in, "momentum_buffer"));
                   return s;
                 },
                 empty<torch::optim::SGD, torch::optim::SGDOptions>});
    // AdamW before Adam: neither derives from the other, but keep the specific one first.
    k.push_back(
        adam_like<torch::optim::AdamW, torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
            "AdamW"));
    k.push_back(
        adam_like<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState>(
            "Adam"));
    k.push_back({"RMSprop",
                 {{"step", true, true},
                  {"square_avg", true, false},
                  {"momentum_buffer", false, false},
                  {"grad_avg", false, false}},
                 is<torch::optim::RMSprop>,
                 [](const OptimizerParamState& base) {
                   const auto& s = static_cast<const torch::optim::RMSpropParamState&>(base);
                   std::map<std::string, at::Tensor> out{{"step", step_tensor(s.step())}};
                   put(out, "square_avg", s.square_avg());
                   put(out, "momentum_buffer", s.momentum_buffer());
                   put(out, "grad_avg", s.grad_avg());
                   return out;
                 },
                 [](const std::map<std::string, at::Tensor>& in) {
                   auto s = std::make_unique<torch::optim::RMSpropParamState>();
                   s->step(step_value(in));
                   s->square_avg(slot(in, "square_avg"));
                   s->momentum_buffer(slot(in, "momentum_buffer"));
                   s->grad_avg(slot(in, "grad_avg"));
                   return s;
                 },
                 empty<torch::optim::RMSprop, torch::optim::RMSpropOptions>});
    k.push_back({"Adagrad",
                 {{"step", true, true}, {"sum", true, false}},
                 is<torch::optim::Adagrad>,
                 [](const OptimizerParamState& base) {
                   const auto& s = static_cast<const torch::optim::AdagradParamState&>(base);
                   std::map<std::string, at::Tensor> out{{"step", step_tensor(s.step())}};
                   put(out, "sum", s.sum());
                   return out;
                 },
                 [](const std::map<std::string, at::Tensor>& in) {
                   auto s = std::make_unique<torch::optim::AdagradParamState>();
                   s->step(step_value(in));
                   s->sum(slot(in, "sum"));
                   return s;
                 },
                 empty<torch::optim::Adagrad, torch::optim::AdagradOptions>});
    return k;
  }();
  return all;
}

const Kind* find_kind(const torch::optim::Optimizer& optimizer) {
  for (const Kind& k : kinds())
    if (k.matches(optimizer)) return &k;
  return nullptr;
}

const Kind& kind_of(const torch::optim::Optimizer& optimizer) {
  if (const Kind* k = find_kind(optimizer)) return *k;
  throw InvalidArgument(
      "checkpoints can save the state of LibTorch's SGD, Adam, AdamW, RMSprop and Adagrad "
      "optimizers; this optimizer is none of them");
}

std::string state_key(const void* impl) { return c10::guts::to_string(impl); }

}  // namespace

std::string optimizer_kind(const torch::optim::Optimizer& optimizer) {
  return kind_of(optimizer).name;
}

ParameterSlots export_slots(const torch::optim::Optimizer& optimizer) {
  const Kind& kind = kind_of(optimizer);
  const auto& state = optimizer.state();
  ParameterSlots out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = state.find(state_key(p.unsafeGetTensorImpl()));
      if (it == state.end()) continue;
      out.emplace_back(p.unsafeGetTensorImpl(), kind.get(*it->second));
    }
  }
  return out;
}

void check_slots(const torch::optim::Optimizer& optimizer, const ParameterSlots& slots,
                 const std::function<std::string(const void*)>& name_of,
                 const std::function<void(const std::string&)>& fail) {
  const Kind& kind = kind_of(optimizer);
  std::map<const void*, at::Tensor> params;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) params[p.unsafeGetTensorImpl()] = p;
  for (const auto& [impl, named] : slots) {
    if (named.empty()) continue;
    const std::string parameter = name_of(impl);
    const at::Tensor& param = params.at(impl);
    for (const auto& [name, t] : named) {
      const SlotSpec* spec = nullptr;
      for (const auto& s : kind.slots)
        if (name == s.name) spec = &s;
      if (spec == nullptr)
        fail(concat("optimizer slot '", name, "' of parameter ", parameter, " is unknown to ",
                    kind.name));
      const bool ok = spec->is_step
                          ? t.dim() == 0 && t.scalar_type() == at::kLong
                          : t.sizes() == param.sizes() && t.scalar_type() == param.scalar_type();
      if (!ok)
        fail(concat("optimizer slot '", name, "' of parameter ", parameter, " is ", t.sizes(), " ",
                    t.scalar_type(), " but the parameter is ", param.sizes(), " ",
                    param.scalar_type()));
    }
    for (const auto& s : kind.slots)
      if (s.required && named.count(s.name) == 0)
        fail(concat("optimizer slot '", s.name, "' of parameter ", parameter, " is missing"));
  }
}

void import_slots(torch::optim::Optimizer& optimizer, const ParameterSlots& slots) {
  const Kind& kind = kind_of(optimizer);
  auto& state = optimizer.state();
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

std::unique_ptr<torch::optim::Optimizer> empty_optimizer_like(
    const torch::optim::Optimizer& optimizer) {
  const Kind* kind = find_kind(optimizer);
  return kind == nullptr ? nullptr : kind->make_empty(optimizer);
}

std::map<std::string, at::Tensor> state_slots(const torch::optim::Optimizer& optimizer,
                                              const OptimizerParamState& state) {
  return kind_of(optimizer).get(state);
}

std::unique_ptr<OptimizerParamState> state_of_slots(
    const torch::optim::Optimizer& optimizer, const std::map<std::string, at::Tensor>& slots) {
  return kind_of(optimizer).make(slots);
}

}  // namespace dist::detail
