// The table of optimizer kinds (optimizer_kinds.h).
#include "core/optimizer_kinds.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <mutex>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <unordered_map>

#include "dist/core/error.h"

namespace dist::detail {
namespace {

using torch::optim::OptimizerParamState;

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

// One option of `Options` as a named number.
template <class Options>
struct OptionField {
  const char* name;
  double (*read)(const Options&);
  void (*write)(Options&, double);
};

// TORCH_ARG gives each option a getter and a setter of one name (overloaded, so no member
// pointer can name them): `Options::accessor` as a named number.
// clang-format off
#define DIST_OPTION(Options, accessor)                                              \
  OptionField<Options> {                                                            \
    #accessor,                                                                      \
    [](const Options& o) { return static_cast<double>(o.accessor()); },             \
    [](Options& o, double v) {                                                      \
      o.accessor(static_cast<std::decay_t<decltype(o.accessor())>>(v));             \
    }                                                                               \
  }
// clang-format on

std::vector<OptionField<torch::optim::SGDOptions>> sgd_fields() {
  using O = torch::optim::SGDOptions;
  return {DIST_OPTION(O, lr), DIST_OPTION(O, momentum), DIST_OPTION(O, dampening),
          DIST_OPTION(O, weight_decay), DIST_OPTION(O, nesterov)};
}

template <class Options>
std::vector<OptionField<Options>> adam_fields() {
  return {DIST_OPTION(Options, lr),
          {"beta1", [](const Options& o) { return std::get<0>(o.betas()); },
           [](Options& o, double v) { o.betas(std::make_tuple(v, std::get<1>(o.betas()))); }},
          {"beta2", [](const Options& o) { return std::get<1>(o.betas()); },
           [](Options& o, double v) { o.betas(std::make_tuple(std::get<0>(o.betas()), v)); }},
          DIST_OPTION(Options, eps),
          DIST_OPTION(Options, weight_decay),
          DIST_OPTION(Options, amsgrad)};
}

std::vector<OptionField<torch::optim::RMSpropOptions>> rmsprop_fields() {
  using O = torch::optim::RMSpropOptions;
  return {DIST_OPTION(O, lr),           DIST_OPTION(O, alpha),    DIST_OPTION(O, eps),
          DIST_OPTION(O, weight_decay), DIST_OPTION(O, momentum), DIST_OPTION(O, centered)};
}

std::vector<OptionField<torch::optim::AdagradOptions>> adagrad_fields() {
  using O = torch::optim::AdagradOptions;
  return {DIST_OPTION(O, lr), DIST_OPTION(O, lr_decay), DIST_OPTION(O, weight_decay),
          DIST_OPTION(O, initial_accumulator_value), DIST_OPTION(O, eps)};
}

#undef DIST_OPTION

// `kind` with its options read, written and made from named numbers through `fields`.
template <class Optimizer, class Options>
OptimizerKind with_options(OptimizerKind kind, std::vector<OptionField<Options>> fields) {
  kind.read_options = [fields](const torch::optim::OptimizerOptions& base) {
    const auto& options = static_cast<const Options&>(base);
    OptimizerOptionValues values;
    for (const auto& f : fields) values[f.name] = f.read(options);
    return values;
  };
  kind.write_options = [fields](torch::optim::OptimizerOptions& base,
                                const OptimizerOptionValues& values) {
    auto& options = static_cast<Options&>(base);
    for (const auto& f : fields)
      if (auto it = values.find(f.name); it != values.end()) f.write(options, it->second);
  };
  kind.make_over = [write = kind.write_options, name = kind.name](
                       std::vector<at::Tensor> parameters, const OptimizerOptionValues& values) {
    auto lr = values.find("lr");
    DIST_CHECK_ARG(lr != values.end(), "an optimizer of kind ", name,
                   " needs a learning rate ('lr'); none was given");
    Options options(lr->second);
    write(options, values);
    // Made whole, so that a kind that makes its state in the constructor (Adagrad's
    // initial_accumulator_value) sees every option.
    return std::make_unique<Optimizer>(std::move(parameters), options);
  };
  return kind;
}

// Adam and AdamW share their slots.
template <class Optimizer, class Options, class State>
OptimizerKind adam_like(const char* name) {
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
          empty<Optimizer, Options>,
          /*read_options=*/{},
          /*write_options=*/{},
          /*make_over=*/{}};
}

OptimizerKind sgd_kind() {
  return with_options<torch::optim::SGD>(
      OptimizerKind{"SGD",
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
                    empty<torch::optim::SGD, torch::optim::SGDOptions>,
                    /*read_options=*/{},
                    /*write_options=*/{},
                    /*make_over=*/{}},
      sgd_fields());
}

OptimizerKind rmsprop_kind() {
  return with_options<torch::optim::RMSprop>(
      OptimizerKind{"RMSprop",
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
                    empty<torch::optim::RMSprop, torch::optim::RMSpropOptions>,
                    /*read_options=*/{},
                    /*write_options=*/{},
                    /*make_over=*/{}},
      rmsprop_fields());
}

OptimizerKind adagrad_kind() {
  return with_options<torch::optim::Adagrad>(
      OptimizerKind{"Adagrad",
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
                    empty<torch::optim::Adagrad, torch::optim::AdagradOptions>,
                    /*read_options=*/{},
                    /*write_options=*/{},
                    /*make_over=*/{}},
      adagrad_fields());
}

// The table. AdamW before Adam: neither derives from the other, but keep the specific one first.
const std::vector<OptimizerKind>& kinds() {
  using namespace torch::optim;
  static const std::vector<OptimizerKind> all{
      sgd_kind(),
      with_options<AdamW>(adam_like<AdamW, AdamWOptions, AdamWParamState>("AdamW"),
                          adam_fields<AdamWOptions>()),
      with_options<Adam>(adam_like<Adam, AdamOptions, AdamParamState>("Adam"),
                         adam_fields<AdamOptions>()),
      rmsprop_kind(),
      adagrad_kind(),
  };
  return all;
}

// The table's walk: the one place an optimizer object's kind is looked up. Only through
// OptimizerWithKind, which remembers its answer by class.
const OptimizerKind* find_optimizer_kind(const torch::optim::Optimizer& optimizer) {
  for (const OptimizerKind& k : kinds())
    if (k.matches(optimizer)) return &k;
  return nullptr;
}

}  // namespace

OptimizerWithKind::OptimizerWithKind(torch::optim::Optimizer& of) : optimizer(of), kind(nullptr) {
  // Steps on several replica threads and the ps tasks' threads ask at once; a class is
  // remembered once, and the few classes a process uses keep the map small.
  static std::mutex mutex;
  static std::unordered_map<std::type_index, const OptimizerKind*> by_class;
  const std::type_index type(typeid(of));
  std::lock_guard<std::mutex> lock(mutex);
  auto it = by_class.find(type);
  if (it == by_class.end()) it = by_class.emplace(type, find_optimizer_kind(of)).first;
  kind = it->second;
}

const OptimizerKind* find_optimizer_kind(const std::string& name) {
  for (const OptimizerKind& k : kinds())
    if (name == k.name) return &k;
  return nullptr;
}

std::string optimizer_kind_names() {
  std::string names;
  const auto& all = kinds();
  for (size_t i = 0; i < all.size(); ++i)
    names += (i == 0 ? "" : i + 1 == all.size() ? " and " : ", ") + std::string(all[i].name);
  return names;
}

}  // namespace dist::detail
