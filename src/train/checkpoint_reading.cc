// Checkpoint::read (dist/train/checkpoint.h) in two phases: a Reading checks the whole file
// (and its pieces, checkpoint_pieces.h) against this Checkpoint's objects and takes every value
// it will write; only then does apply() change anything, so a damaged or mismatched file
// leaves the models, optimizers and tensors as they were.
#include "dist/train/checkpoint.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "dist/core/error.h"
#include "distribute/step/optimizer_slots.h"
#include "train/checkpoint_format.h"
#include "train/checkpoint_object.h"
#include "train/checkpoint_pieces.h"
#include "train/checkpoint_tensor_taker.h"
#include "train/hook_state.h"
#include "train/safetensors_reader.h"
#include "train/sealed_file.h"

namespace dist {
namespace {

double parse_learning_rate(const std::string& path, const std::map<std::string, std::string>& meta,
                           const std::string& object, const std::string& key) {
  auto lr = meta.find(key);
  if (lr == meta.end())
    detail::fail_reading(path,
                         "object '" + object + "': the learning rate '" + key + "' is missing");
  char* end = nullptr;
  const double value = std::strtod(lr->second.c_str(), &end);
  if (lr->second.empty() || *end != '\0' || !std::isfinite(value) || value < 0)
    detail::fail_reading(path, "object '" + object + "': the learning rate '" + key +
                                   "' is not a non-negative number: '" + lr->second + "'");
  return value;
}

}  // namespace

struct Checkpoint::Reading {
  // What apply() will change, gathered (and checked) before it changes anything.
  struct ModelRestore {
    std::shared_ptr<torch::nn::Module> module;
    std::shared_ptr<DistributedVariables> variables;  // if placed by a strategy
    std::vector<at::Tensor> parameters;               // in named_parameters() order
    std::vector<at::Tensor> buffers;                  // in named_buffers() order
  };
  struct OptimizerRestore {
    torch::optim::Optimizer* optimizer;
    const detail::OptimizerKind* kind;  // found when the optimizer was added
    detail::ParameterSlots slots;
    std::vector<double> learning_rates;
    std::shared_ptr<DistributedVariables> variables;  // of its model, if placed by a strategy
  };

  Reading(const Checkpoint& checkpoint, std::string path, const detail::SafetensorsReader& file,
          Env* env);
  void apply(bool restore_random) const;

  TrainingState state;

 private:
  detail::WantedRanges wanted_ranges() const;
  detail::CheckedTensors verified_tensors(const detail::SafetensorsReader& file,
                                          const detail::WantedRanges& wanted) const;
  void take_slots(const Object& model, const std::string& name, const at::Tensor& p,
                  detail::TensorTaker& taker, OptimizerRestore& restore) const;
  void check_objects(const std::map<std::string, detail::FileObject>& in_file,
                     const std::map<std::string, at::Tensor>& all) const;
  void take_models_and_values(detail::TensorTaker& taker);
  void take_optimizers(const std::map<std::string, detail::FileObject>& in_file,
                       detail::TensorTaker& taker);
  void take_random(detail::TensorTaker& taker);
  void take_hooks(const std::map<std::string, detail::FileObject>& in_file,
                  detail::TensorTaker& taker);
  void check_nothing_left(const detail::TensorTaker& taker) const;
  void read_state();
  static void restore_slot_shares(const OptimizerRestore& restore);

  const Checkpoint& checkpoint_;
  std::string path_;
  std::map<std::string, std::string> meta_;
  std::vector<ModelRestore> models_;
  std::vector<std::pair<at::Tensor, at::Tensor>> values_;  // (destination, value)
  std::vector<OptimizerRestore> optimizers_;
  std::vector<std::pair<CommunicationHook*, std::map<std::string, at::Tensor>>> hooks_;
  at::Tensor random_;  // undefined: the file holds no generator state
};

Checkpoint::Reading::Reading(const Checkpoint& checkpoint, std::string path,
                             const detail::SafetensorsReader& file, Env* env)
    : checkpoint_(checkpoint), path_(std::move(path)), meta_(file.metadata()) {
  // A model whose strategy keeps shares reads only its shares, from any checkpoint's layout.
  const detail::WantedRanges wanted = wanted_ranges();
  auto all = verified_tensors(file, wanted);
  // A checkpoint written in pieces: its parameters and slots beside the rest.
  if (meta_.count(detail::kCheckpointPieces) != 0) {
    auto save = meta_.find(detail::kCheckpointSave);
    if (save == meta_.end())
      detail::fail_reading(path_, "it was written in pieces but names no save of them");
    detail::read_checkpoint_pieces(
        path_,
        {static_cast<int>(detail::parse_metadata_int(path_, meta_, detail::kCheckpointPieces)),
         detail::parse_metadata_int(path_, meta_, "step"), save->second},
        env, wanted, all);
  }
  const auto in_file = detail::objects_in_file(path_, meta_, all.tensors);
  check_objects(in_file, all.tensors);
  // Check every object's tensors before changing anything.
  detail::TensorTaker taker(path_, std::move(all));
  take_models_and_values(taker);
  take_optimizers(in_file, taker);
  take_random(taker);
  take_hooks(in_file, taker);
  check_nothing_left(taker);
  read_state();
}

// The ranges this worker keeps: of each parameter of a model whose strategy keeps shares
// ("<model>/<parameter>"), and of its optimizers' slots but the step counters
// ("<optimizer>/<parameter>/<slot>"), whose ranges are the parameter's; none of a skipped
// object's tensors.
detail::WantedRanges Checkpoint::Reading::wanted_ranges() const {
  auto ranges = std::make_shared<std::map<std::string, detail::ElementRange>>();
  for (const auto& object : checkpoint_.objects_) {
    if (object->kind != detail::kModelKind || !object->keeps_shares()) continue;
    const auto shares = object->variables->parameter_shares();
    const auto named = object->saved_module()->named_parameters();
    for (size_t i = 0; i < named.size() && i < shares.size(); ++i) {
      const detail::ElementRange range{shares[i].begin, shares[i].values.numel()};
      (*ranges)[object->name + "/" + named[i].key()] = range;
      for (const auto& optimizer : checkpoint_.objects_)
        if (optimizer->kind == detail::kOptimizerKind && optimizer->model == object->name)
          (*ranges)[optimizer->name + "/" + named[i].key() + "/"] = range;
    }
  }
  // A skipped object's tensors are only checked (their checksums), never held.
  auto skipped = std::make_shared<std::set<std::string>>(checkpoint_.skipped_);
  if (ranges->empty() && skipped->empty()) return nullptr;
  return [ranges, skipped](const std::string& name) -> std::optional<detail::ElementRange> {
    if (skipped->count(detail::tensor_owner(name)) != 0) return detail::ElementRange{0, 0};
    if (auto it = ranges->find(name); it != ranges->end()) return it->second;
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos || name.compare(slash + 1, std::string::npos, "step") == 0)
      return std::nullopt;  // a step counter is whole
    auto slot = ranges->find(name.substr(0, slash + 1));
    if (slot == ranges->end()) return std::nullopt;
    return slot->second;
  };
}

detail::CheckedTensors Checkpoint::Reading::verified_tensors(
    const detail::SafetensorsReader& file, const detail::WantedRanges& wanted) const {
  auto format = meta_.find("format");
  if (format == meta_.end() || format->second != detail::kCheckpointFormat)
    detail::fail_reading(
        path_, detail::concat("not a checkpoint of this library (metadata format is '",
                              format == meta_.end() ? "missing" : format->second, "', expected '",
                              detail::kCheckpointFormat, "')"));
  detail::CheckedTensors all;
  const std::string problem = detail::read_checked_tensors(file, wanted, all);
  if (!problem.empty()) detail::fail_reading(path_, problem);
  return all;
}

// The objects: the same names and kinds here and in the file (bar skipped ones).
void Checkpoint::Reading::check_objects(const std::map<std::string, detail::FileObject>& in_file,
                                        const std::map<std::string, at::Tensor>& all) const {
  for (const auto& object : checkpoint_.objects_) {
    auto it = in_file.find(object->name);
    if (it == in_file.end())
      detail::fail_reading(
          path_, detail::concat("object '", object->name, "' (a ", object->kind,
                                ") was added to this Checkpoint but is not in the file; was the "
                                "file written for other objects?"));
    if (it->second.kind != object->kind)
      detail::fail_reading(path_,
                           detail::concat("object '", object->name, "' is a ", it->second.kind,
                                          " in the file but a ", object->kind, " here"));
  }
  for (const auto& [name, object] : in_file)
    if (checkpoint_.find(name) == nullptr && checkpoint_.skipped_.count(name) == 0)
      detail::fail_reading(
          path_, detail::concat("object '", name, "' (a ", object.kind,
                                ") is in the file but was not added to this Checkpoint; add it, "
                                "or skip(\"",
                                name, "\") to leave it unread"));
  for (const auto& [name, t] : all) {
    const std::string owner = detail::tensor_owner(name);
    if (owner != detail::kRandomStateOwner && in_file.count(owner) == 0)
      detail::fail_reading(path_, "tensor '" + name +
                                      "' belongs to no object of the file (object/" + owner +
                                      " is missing from the metadata)");
  }
}

void Checkpoint::Reading::take_models_and_values(detail::TensorTaker& taker) {
  for (const auto& object : checkpoint_.objects_) {
    const std::string& name = object->name;
    const std::string prefix = name + "/";
    if (object->kind == detail::kModelKind) {
      ModelRestore restore{object->saved_module(), object->variables, {}, {}};
      for (const auto& p : restore.module->named_parameters()) {
        // A strategy may hold a parameter released between steps (Sharding::kParameters).
        const auto sizes = object->variables ? object->variables->parameter_sizes(p.value())
                                             : p.value().sizes().vec();
        restore.parameters.push_back(
            taker.take(name, prefix + p.key(), sizes, p.value().scalar_type(), "model"));
      }
      for (const auto& b : restore.module->named_buffers())
        restore.buffers.push_back(taker.take(name, prefix + b.key(), b.value(), "model"));
      models_.push_back(std::move(restore));
    } else if (object->kind == detail::kTensorKind) {
      values_.emplace_back(object->value, taker.take(name, name, object->value, "tensor"));
    }
  }
}

void Checkpoint::Reading::take_optimizers(const std::map<std::string, detail::FileObject>& in_file,
                                          detail::TensorTaker& taker) {
  for (const auto& object : checkpoint_.objects_) {
    if (object->kind != detail::kOptimizerKind) continue;
    const std::string& name = object->name;
    const detail::FileObject& saved = in_file.at(name);
    const torch::optim::Optimizer& optimizer = *object->optimizer;
    const std::string kind = object->optimizer_kind->name;  // listed: checked when added
    if (saved.optimizer_class != kind)
      detail::fail_reading(path_,
                           detail::concat("object '", name, "': it holds ", saved.optimizer_class,
                                          " state but the optimizer is ", kind));
    if (saved.model != object->model)
      detail::fail_reading(
          path_, detail::concat("object '", name, "': the optimizer of model '", saved.model,
                                "' in the file optimizes model '", object->model, "' here"));
    const Object& model = *checkpoint_.find(object->model);
    const detail::ParameterNames names(*model.saved_module());
    auto name_of = [&](const void* impl) -> std::string {
      const std::string* parameter = names.find(impl);
      DIST_CHECK_ARG(parameter != nullptr, "Checkpoint: optimizer '", name,
                     "' updates a parameter that is not in its model '", object->model,
                     "'; add the optimizer with the model its parameters belong to");
      return *parameter;
    };
    OptimizerRestore restore{object->optimizer, object->optimizer_kind, {}, {}, model.variables};
    for (const auto& group : optimizer.param_groups())
      for (const auto& p : group.params())
        take_slots(model, name + "/" + name_of(p.unsafeGetTensorImpl()) + "/", p, taker, restore);
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g)
      restore.learning_rates.push_back(
          parse_learning_rate(path_, meta_, name, saved.learning_rate + std::to_string(g)));
    const auto& variables = model.variables;
    std::map<const void*, int64_t> share_counts;  // of a model that keeps shares: its slots' too
    if (model.keeps_shares()) {
      const auto shares = variables->parameter_shares();
      const auto params = variables->primary()->parameters();
      for (size_t i = 0; i < params.size() && i < shares.size(); ++i)
        share_counts[params[i].unsafeGetTensorImpl()] = shares[i].values.numel();
    }
    detail::check_slots(
        object->optimizer_with_kind(), restore.slots, name_of,
        [&](const std::string& message) {
          detail::fail_reading(path_, "object '" + name + "': " + message);
        },
        [&](const at::Tensor& p) -> std::vector<int64_t> {
          if (auto it = share_counts.find(p.unsafeGetTensorImpl()); it != share_counts.end())
            return {it->second};  // checked whole by take_slots
          return variables ? variables->parameter_sizes(p) : p.sizes().vec();
        });
    optimizers_.push_back(std::move(restore));
  }
}

// The slots of parameter `p` (their names start with `prefix`). A model that keeps shares
// reads its share of each but the step counter: each must be of the parameter's whole shape.
void Checkpoint::Reading::take_slots(const Object& model, const std::string& prefix,
                                     const at::Tensor& p, detail::TensorTaker& taker,
                                     OptimizerRestore& restore) const {
  if (!model.keeps_shares()) {
    restore.slots.emplace_back(p.unsafeGetTensorImpl(), taker.take_all(prefix));
    return;
  }
  const auto sizes = model.variables->parameter_sizes(p);
  const auto ranged = taker.ranged_under(prefix);
  auto slots = taker.take_all(prefix);
  for (const auto& [slot, t] : slots) {
    auto whole = ranged.find(slot);
    if (slot == "step" || (whole != ranged.end() && whole->second == sizes)) continue;
    detail::fail_reading(
        path_,
        detail::concat("tensor '", prefix, slot, "' is ",
                       at::IntArrayRef(whole != ranged.end() ? whole->second : t.sizes().vec()),
                       " but its parameter is ", at::IntArrayRef(sizes),
                       "; was it written for a different model?"));
  }
  restore.slots.emplace_back(p.unsafeGetTensorImpl(), std::move(slots));
}

void Checkpoint::Reading::take_random(detail::TensorTaker& taker) {
  auto taken = taker.take_if_present(detail::kRandomStateTensor);
  if (!taken) return;
  // LibTorch checks a generator state (size, dtype, mt19937 invariants) only while setting
  // it, with c10::Error: try it on a scratch generator, before anything has changed.
  try {
    at::make_generator<at::CPUGeneratorImpl>().set_state(*taken);
  } catch (const c10::Error& e) {
    detail::fail_reading(path_, detail::concat("tensor '", detail::kRandomStateTensor,
                                               "' is not a CPU random generator state (",
                                               e.what_without_backtrace(), ")"));
  }
  random_ = *taken;
}

// This worker's state of each hook; the other workers' are theirs to take.
void Checkpoint::Reading::take_hooks(const std::map<std::string, detail::FileObject>& in_file,
                                     detail::TensorTaker& taker) {
  for (const auto& object : checkpoint_.objects_) {
    if (object->kind != detail::kHookKind) continue;
    const std::string& name = object->name;
    const detail::FileObject& saved = in_file.at(name);
    if (saved.hook != object->hook->name())
      detail::fail_reading(
          path_, detail::concat("object '", name, "': it holds the state of communication hook '",
                                saved.hook, "' but the hook here is '", object->hook->name(),
                                "'; resume with the same gradient compression"));
    const int workers = object->job->workers();
    if (saved.workers != workers)
      detail::fail_reading(
          path_, detail::concat("object '", name, "': it holds the state of ", saved.workers,
                                " workers' communication hooks but this job has ", workers,
                                " (each worker's error feedback is its own); resume with ",
                                saved.workers, " workers"));
    const int me = object->job->worker_index();
    for (int w = 0; w < workers; ++w) {
      auto state = taker.take_all(name + "/worker:" + std::to_string(w) + "/");
      if (w == me) hooks_.emplace_back(object->hook.get(), std::move(state));
    }
  }
}

void Checkpoint::Reading::check_nothing_left(const detail::TensorTaker& taker) const {
  for (const auto& [name, t] : taker.left()) {
    const std::string owner = detail::tensor_owner(name);
    const Object* object = checkpoint_.find(owner);
    if (object == nullptr) continue;  // a skipped object's
    detail::fail_reading(path_, detail::concat("object '", owner, "': tensor '", name,
                                               "' is not in the ", object->kind,
                                               object->kind == detail::kOptimizerKind
                                                   ? " (a slot of a parameter it does not update)"
                                                   : "",
                                               "; was it written for a different model?"));
  }
}

void Checkpoint::Reading::read_state() {
  state.step = detail::parse_metadata_int(path_, meta_, "step");
  state.epoch = detail::parse_metadata_int(path_, meta_, "epoch");
  state.position.epoch = detail::parse_metadata_int(path_, meta_, "position.epoch");
  state.position.elements = detail::parse_metadata_int(path_, meta_, "position.elements");
  for (const auto& [key, value] : meta_)
    if (detail::starts_with(key, detail::kStateValuePrefix))
      state.values[key.substr(sizeof(detail::kStateValuePrefix) - 1)] = value;
}

// The shares of the slots, to the strategy that keeps them, by parameter index.
void Checkpoint::Reading::restore_slot_shares(const OptimizerRestore& restore) {
  const auto params = restore.variables->primary()->parameters();
  std::map<const void*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = i;
  std::map<size_t, std::map<std::string, at::Tensor>> shares;
  for (const auto& [impl, slots] : restore.slots)
    if (!slots.empty()) shares[index.at(impl)] = slots;
  restore.variables->restore_slot_shares(*restore.optimizer, shares);
}

// To the primary modules, then the strategies' placements follow.
void Checkpoint::Reading::apply(bool restore_random) const {
  torch::NoGradGuard no_grad;
  for (const auto& model : models_) {
    if (model.variables != nullptr) {
      model.variables->restore(model.parameters, model.buffers);
      continue;
    }
    auto parameters = model.module->parameters();
    for (size_t p = 0; p < parameters.size(); ++p) parameters[p].copy_(model.parameters[p]);
    auto buffers = model.module->buffers();
    for (size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(model.buffers[b]);
  }
  for (const auto& [destination, value] : values_) destination.copy_(value);
  for (const auto& restore : optimizers_) {
    for (size_t g = 0; g < restore.learning_rates.size(); ++g)
      restore.optimizer->param_groups()[g].options().set_lr(restore.learning_rates[g]);
    if (restore.variables != nullptr && restore.variables->keeps_shares()) {
      restore_slot_shares(restore);
      continue;
    }
    detail::import_slots({*restore.optimizer, restore.kind}, restore.slots);
    if (restore.variables != nullptr) restore.variables->sync_slots_from(*restore.optimizer);
  }
  for (const auto& [hook, state] : hooks_) hook->load_state(state);
  if (random_.defined() && restore_random) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(random_);
  }
}

void Checkpoint::read(const std::string& path, Env* env) {
  // The file's layout is checked before its tensors are allocated.
  const detail::SafetensorsReader file(path, env);
  const Reading reading(*this, path, file, env);
  reading.apply(save_random_state);
  state = reading.state;
}

}  // namespace dist
