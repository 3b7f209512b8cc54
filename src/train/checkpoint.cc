#include "dist/train/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "dist/core/reduce_op.h"
#include "dist/train/safetensors.h"
#include "distribute/optimizer_slots.h"
#include "train/atomic_file.h"
#include "train/checkpoint_checksums.h"
#include "train/checkpoint_pieces.h"
#include "train/hook_state.h"
#include "train/safetensors_reader.h"
#include "train/sealed_file.h"

namespace dist {
namespace {

constexpr char kFormat[] = "dist.checkpoint/1";
constexpr char kRandom[] = "rng/cpu";
constexpr char kRandomOwner[] = "rng";
constexpr char kValuePrefix[] = "value/";
constexpr char kObjectPrefix[] = "object/";
// Files written before named objects: one model and one optimizer, under these names.
constexpr char kLegacyModel[] = "model";
constexpr char kLegacyOptimizer[] = "optimizer";
constexpr char kLegacyLearningRate[] = "optimizer.lr/";

constexpr char kModelKind[] = "model";
constexpr char kOptimizerKind[] = "optimizer";
constexpr char kTensorKind[] = "tensor";
constexpr char kHookKind[] = "communication_hook";

std::string double_text(double v) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw DataError(detail::concat("checkpoint '", path, "': ", message));
}

int64_t parse_int(const std::string& path, const std::map<std::string, std::string>& metadata,
                  const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) fail(path, "metadata '" + key + "' is missing");
  try {
    size_t used = 0;
    int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  fail(path, "metadata '" + key + "' is not an integer: '" + it->second + "'");
}

// The object a tensor of the file belongs to: its name's first path component.
std::string owner_of(const std::string& tensor) { return tensor.substr(0, tensor.find('/')); }

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

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

// An optimizer's parameters must all be its model's: their names are its model's.
void check_optimizer_of(const std::string& name, const torch::optim::Optimizer& optimizer,
                        const std::string& model, const ParameterNames& names) {
  DIST_CHECK_ARG(names.holds_all(optimizer), "Checkpoint: optimizer '", name,
                 "' updates a parameter that is not in its model '", model,
                 "' (a parameter group added since?); add the optimizer with the model its "
                 "parameters belong to");
}

// An object as the file describes it.
struct FileObject {
  std::string kind;
  std::string optimizer_class;  // an optimizer's
  std::string model;            // the model an optimizer's slots are named by
  std::string learning_rate;    // the metadata prefix of an optimizer's learning rates
  std::string hook;             // a communication hook's name
  int64_t workers = 0;          // how many workers' hook states
};

// The objects of a file: from its "object/" entries, or those of a file written before named
// objects ("model" if it holds model tensors, "optimizer" if it holds optimizer state).
std::map<std::string, FileObject> objects_in_file(
    const std::string& path, const std::map<std::string, std::string>& meta,
    const std::map<std::string, at::Tensor>& tensors) {
  std::map<std::string, FileObject> objects;
  auto get = [&](const std::string& key) {
    auto it = meta.find(key);
    if (it == meta.end()) fail(path, "metadata '" + key + "' is missing");
    return it->second;
  };
  for (auto it = meta.lower_bound(kObjectPrefix);
       it != meta.end() && starts_with(it->first, kObjectPrefix); ++it) {
    const std::string name = it->first.substr(sizeof(kObjectPrefix) - 1);
    if (name.find('/') != std::string::npos) continue;  // an optimizer's entries
    FileObject object{it->second, "", "", "", "", 0};
    if (object.kind == kOptimizerKind) {
      const std::string prefix = kObjectPrefix + name + "/";
      object.optimizer_class = get(prefix + "class");
      object.model = get(prefix + "model");
      object.learning_rate = prefix + "lr/";
    } else if (object.kind == kHookKind) {
      object.hook = get(kObjectPrefix + name + "/hook");
      object.workers = parse_int(path, meta, kObjectPrefix + name + "/workers");
    } else if (object.kind != kModelKind && object.kind != kTensorKind) {
      fail(path, "object '" + name + "' is of an unknown kind '" + object.kind +
                     "' (expected model, optimizer, tensor or communication_hook)");
    }
    objects[name] = object;
  }
  if (!objects.empty()) return objects;
  for (const auto& [name, t] : tensors)
    if (owner_of(name) == kLegacyModel) objects[kLegacyModel] = {kModelKind, "", "", "", "", 0};
  if (auto it = meta.find(kLegacyOptimizer); it != meta.end())
    objects[kLegacyOptimizer] = {kOptimizerKind,      it->second, kLegacyModel,
                                 kLegacyLearningRate, "",         0};
  return objects;
}

}  // namespace

// One named object; immutable once added, so copies of a Checkpoint share it.
struct Checkpoint::Object {
  std::string name;
  std::string kind = kModelKind;                    // kModelKind, kOptimizerKind or kTensorKind
  std::shared_ptr<torch::nn::Module> module;        // a plain model
  std::shared_ptr<DistributedVariables> variables;  // a model placed by a strategy
  torch::optim::Optimizer* optimizer = nullptr;
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
  // A model whose strategy keeps its parameters in shares: written in pieces.
  bool keeps_shares() const { return variables != nullptr && variables->keeps_shares(); }
};

Checkpoint::Checkpoint(std::shared_ptr<torch::nn::Module> model,
                       torch::optim::Optimizer* optimizer) {
  if (model != nullptr) add(kLegacyModel, std::move(model));
  if (optimizer != nullptr)
    add(kLegacyOptimizer, optimizer, kLegacyModel);
  else
    skip(kLegacyOptimizer);
}

Checkpoint::Checkpoint(std::shared_ptr<DistributedVariables> variables,
                       torch::optim::Optimizer* optimizer) {
  if (variables != nullptr) add(kLegacyModel, std::move(variables));
  if (optimizer != nullptr)
    add(kLegacyOptimizer, optimizer, kLegacyModel);
  else
    skip(kLegacyOptimizer);
}

const Checkpoint::Object* Checkpoint::find(const std::string& name) const {
  for (const auto& object : objects_)
    if (object->name == name) return object.get();
  return nullptr;
}

void Checkpoint::check_new_name(const std::string& name) const {
  DIST_CHECK_ARG(!name.empty(), "Checkpoint: an object's name is empty; give it a name");
  DIST_CHECK_ARG(name.find('/') == std::string::npos, "Checkpoint: object name '", name,
                 "' holds a '/' (it separates the object from its tensors); use another name");
  DIST_CHECK_ARG(!starts_with(name, "__") && name != kRandomOwner, "Checkpoint: object name '",
                 name, "' is reserved (names starting with \"__\" and \"rng\" are the file's own)");
  DIST_CHECK_ARG(find(name) == nullptr, "Checkpoint: an object named '", name,
                 "' was already added; give each object its own name");
}

Checkpoint& Checkpoint::append(std::shared_ptr<const Object> object) {
  skipped_.erase(object->name);  // an added object is always read
  objects_.push_back(std::move(object));
  return *this;
}

Checkpoint& Checkpoint::add(const std::string& name, std::shared_ptr<torch::nn::Module> model) {
  check_new_name(name);
  DIST_CHECK_ARG(model != nullptr, "Checkpoint: model '", name, "' is null");
  auto object = std::make_shared<Object>();
  object->name = name;
  object->module = std::move(model);
  return append(std::move(object));
}

Checkpoint& Checkpoint::add(const std::string& name,
                            std::shared_ptr<DistributedVariables> variables) {
  check_new_name(name);
  DIST_CHECK_ARG(variables != nullptr, "Checkpoint: model '", name, "' is null");
  auto object = std::make_shared<Object>();
  object->name = name;
  object->variables = std::move(variables);
  return append(std::move(object));
}

Checkpoint& Checkpoint::add(const std::string& name, std::shared_ptr<MirroredOptimizer> optimizer) {
  DIST_CHECK_ARG(optimizer != nullptr, "Checkpoint: optimizer '", name, "' is null");
  MirroredOptimizer* raw = optimizer.get();
  return add_optimizer(name, &raw->optimizer(), "", std::move(optimizer));
}

Checkpoint& Checkpoint::add(const std::string& name, MirroredOptimizer* optimizer) {
  DIST_CHECK_ARG(optimizer != nullptr, "Checkpoint: optimizer '", name, "' is null");
  // Its model is the one whose variables it updates (not found by parameters: a strategy may
  // hand the optimizer other tensors than the primary module's).
  std::string model;
  for (const auto& object : objects_)
    if (object->variables.get() == &optimizer->variables()) model = object->name;
  DIST_CHECK_ARG(!model.empty(), "Checkpoint: optimizer '", name,
                 "' updates the variables of no model added so far; add its model (the "
                 "Mirrored model it was made for) first, then the optimizer");
  return add_optimizer(name, &optimizer->optimizer(), model, nullptr);
}

Checkpoint& Checkpoint::add(const std::string& name, torch::optim::Optimizer* optimizer,
                            const std::string& model) {
  DIST_CHECK_ARG(optimizer != nullptr, "Checkpoint: optimizer '", name, "' is null");
  return add_optimizer(name, optimizer, model, nullptr);
}

Checkpoint& Checkpoint::add_optimizer(const std::string& name, torch::optim::Optimizer* optimizer,
                                      std::string model, std::shared_ptr<MirroredOptimizer> owner) {
  check_new_name(name);
  try {
    detail::optimizer_kind(*optimizer);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(detail::concat("Checkpoint: optimizer '", name, "': ", e.what()));
  }
  if (model.empty()) {
    for (const auto& object : objects_) {
      if (object->kind == kModelKind &&
          ParameterNames(*object->saved_module()).holds_all(*optimizer)) {
        model = object->name;
        break;
      }
    }
    DIST_CHECK_ARG(!model.empty(), "Checkpoint: the parameters of optimizer '", name,
                   "' belong to no model added so far (its slots are named by its model's "
                   "parameter names); add its model first, then the optimizer");
  } else {
    const Object* target = find(model);
    DIST_CHECK_ARG(target != nullptr && target->kind == kModelKind, "Checkpoint: model '", model,
                   "' of optimizer '", name,
                   "' has not been added; add the model first, then the optimizer");
    DIST_CHECK_ARG(ParameterNames(*target->saved_module()).holds_all(*optimizer),
                   "Checkpoint: optimizer '", name, "' updates parameters that are not in model '",
                   model, "'; add the optimizer with the model its parameters belong to");
  }
  auto object = std::make_shared<Object>();
  object->name = name;
  object->kind = kOptimizerKind;
  object->optimizer = optimizer;
  object->owner = std::move(owner);
  object->model = std::move(model);
  return append(std::move(object));
}

Checkpoint& Checkpoint::add(const std::string& name, at::Tensor value) {
  check_new_name(name);
  DIST_CHECK_ARG(value.defined(), "Checkpoint: tensor '", name, "' is undefined");
  auto object = std::make_shared<Object>();
  object->name = name;
  object->kind = kTensorKind;
  object->value = std::move(value);
  return append(std::move(object));
}

// Checkpoint::add(name, hook, strategy) is in hook_state.cc.
Checkpoint& Checkpoint::add_hook(const std::string& name, std::shared_ptr<CommunicationHook> hook,
                                 std::shared_ptr<const HookJob> job) {
  check_new_name(name);
  auto object = std::make_shared<Object>();
  object->name = name;
  object->kind = kHookKind;
  object->hook = std::move(hook);
  object->job = std::move(job);
  return append(std::move(object));
}

void Checkpoint::gather_worker_states() {
  for (const auto& object : objects_) {
    // Shares are written in pieces, each worker its own: nothing to gather.
    if (object->variables != nullptr && !object->keeps_shares()) object->variables->gather_values();
    if (object->kind == kHookKind) *object->gathered = object->job->gather();
    if (object->kind == kOptimizerKind && !in_pieces(*object))
      if (const auto& model = find(object->model)->variables)
        model->gather_slots(*object->optimizer);
  }
}

bool Checkpoint::in_pieces(const Object& object) const {
  return object.kind == kOptimizerKind ? find(object.model)->keeps_shares() : object.keeps_shares();
}

std::optional<DistributedVariables::ShareWorkers> Checkpoint::pieces_job() const {
  std::optional<DistributedVariables::ShareWorkers> job;
  for (const auto& object : objects_) {
    if (object->kind != kModelKind || !object->keeps_shares()) continue;
    auto its = object->variables->share_workers();
    DIST_CHECK_ARG(!job || (job->index == its.index && job->count == its.count),
                   "Checkpoint: model '", object->name,
                   "' keeps its parameters in shares among other workers than another model "
                   "does; a checkpoint is written in the pieces of one set of workers");
    if (!job) job = std::move(its);
  }
  return job;
}

bool Checkpoint::written_in_pieces() const { return pieces_job().has_value(); }

Checkpoint& Checkpoint::skip(const std::string& name) {
  skipped_.insert(name);
  return *this;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  for (const auto& object : objects_) names.push_back(object->name);
  return names;
}

namespace {

// `gathered`: every worker's state (taken: the next write needs a fresh gather), or empty.
void write_hook_state(const std::string& name, const CommunicationHook& hook, int workers,
                      std::vector<std::map<std::string, at::Tensor>>& gathered,
                      std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      std::map<std::string, std::string>& metadata) {
  std::vector<std::map<std::string, at::Tensor>> states;
  states.swap(gathered);
  if (states.empty() && workers == 1) states.push_back(hook.state());
  DIST_CHECK_ARG(static_cast<int>(states.size()) == workers, "Checkpoint: communication hook '",
                 name, "' runs on ", workers,
                 " workers: call gather_worker_states() on every worker before each write");
  const std::string entry = std::string(kObjectPrefix) + name + "/";
  metadata[entry + "hook"] = hook.name();
  metadata[entry + "workers"] = std::to_string(workers);
  for (int w = 0; w < workers; ++w)
    for (const auto& [key, t] : states[static_cast<size_t>(w)])
      tensors.emplace_back(name + "/worker:" + std::to_string(w) + "/" + key, t);
}

at::Tensor random_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

}  // namespace

// Placed models' values (and slots) into their primary modules, where write() reads them.
void Checkpoint::prepare_to_read() const {
  for (const auto& object : objects_) {
    if (in_pieces(*object)) continue;  // each worker writes its own shares
    if (object->variables != nullptr) object->variables->prepare_to_read();
    if (object->kind == kOptimizerKind)
      if (const auto& model = find(object->model)->variables)
        model->prepare_to_read_slots(*object->optimizer);
  }
}

namespace {

// A collective: every worker learns which failed (`failure`: this one's). Rethrows this
// worker's own failure, or throws a DataError naming another that failed at `what`.
void agree_on_failures(const DistributedVariables::ShareWorkers& job,
                       const std::exception_ptr& failure, const std::string& path,
                       const char* what) {
  std::vector<at::Tensor> failed{at::zeros({job.count}, at::kLong)};
  failed[0][job.index] = failure ? 1 : 0;
  job.all_reduce(failed, ReduceOp::kSum);
  if (failure) std::rethrow_exception(failure);
  for (int w = 0; w < job.count; ++w)
    if (failed[0][w].item<int64_t>() != 0)
      throw DataError(detail::concat("checkpoint '", path, "': worker ", w, " ", what,
                                     " (its own error says why), so the checkpoint is not "
                                     "complete"));
}

// The id of one save in pieces, the same on every worker: the largest of their random draws.
std::string draw_save_id(const DistributedVariables::ShareWorkers& job) {
  std::random_device device;
  const int64_t mine = static_cast<int64_t>((static_cast<uint64_t>(device()) << 31) ^ device());
  std::vector<at::Tensor> id{at::full({1}, mine, at::kLong)};
  job.all_reduce(id, ReduceOp::kMax);
  return std::to_string(id[0].item<int64_t>());
}

}  // namespace

void Checkpoint::write(const std::string& path, Env* env) const { write_then(path, env, {}); }

void Checkpoint::write_then(const std::string& path, Env* env,
                            const std::function<void()>& complete) const {
  const auto job = pieces_job();
  if (!job) {
    write_file(path, env, {});
    if (complete) complete();
    return;
  }
  const detail::PiecesOf of{job->count, state.step, draw_save_id(*job)};
  std::exception_ptr failure;
  try {
    detail::write_checkpoint_piece(path, of, job->index, piece_tensors(), env);
  } catch (...) {
    failure = std::current_exception();
  }
  // Every worker waits for every piece: the checkpoint's own file, which makes it whole, comes
  // only then; and every worker waits for the chief to have written it (and, through
  // `complete`, kept the directory), so no worker returns from a save that is not done.
  agree_on_failures(*job, failure, path, "could not write its piece");
  failure = nullptr;
  if (job->chief) {
    try {
      write_file(path, env, of);
      if (complete) complete();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_on_failures(*job, failure, path, "could not complete the checkpoint's own file");
}

// This worker's shares of the parameters of every model in pieces and of its optimizers' slots.
std::vector<detail::PieceTensor> Checkpoint::piece_tensors() const {
  std::vector<detail::PieceTensor> tensors;
  for (const auto& object : objects_) {
    if (!in_pieces(*object)) continue;
    const Object& model = object->kind == kModelKind ? *object : *find(object->model);
    const auto shares = model.variables->parameter_shares();
    const auto named = model.variables->primary()->named_parameters();
    if (object->kind == kModelKind) {
      for (size_t i = 0; i < named.size(); ++i)
        tensors.push_back({object->name + "/" + named[i].key(), shares[i].begin,
                           model.variables->parameter_sizes(named[i].value()), shares[i].values});
      continue;
    }
    check_optimizer_of(object->name, *object->optimizer, model.name,
                       ParameterNames(*model.saved_module()));
    for (const auto& [i, slots] : model.variables->slot_shares(*object->optimizer)) {
      const auto sizes = model.variables->parameter_sizes(named[i].value());
      for (const auto& [slot, t] : slots) {
        // A slot of the parameter's shape is cut as the parameter is; a step counter is whole.
        const bool counter = slot == "step";
        tensors.push_back(
            {object->name + "/" + named[i].key() + "/" + slot, shares[i].begin, sizes, t, counter});
      }
    }
  }
  return tensors;
}

namespace {

// The metadata of a checkpoint file before its objects': the format, the training state and,
// when `of` has pieces, which save's pieces hold the rest.
std::map<std::string, std::string> state_metadata(const TrainingState& state,
                                                  const detail::PiecesOf& of) {
  std::map<std::string, std::string> metadata;
  metadata["format"] = kFormat;
  if (of.pieces > 0) {
    metadata[detail::kCheckpointPieces] = std::to_string(of.pieces);
    metadata[detail::kCheckpointSave] = of.save;
  }
  metadata["step"] = std::to_string(state.step);
  metadata["epoch"] = std::to_string(state.epoch);
  metadata["position.epoch"] = std::to_string(state.position.epoch);
  metadata["position.elements"] = std::to_string(state.position.elements);
  for (const auto& [key, value] : state.values) metadata[kValuePrefix + key] = value;
  return metadata;
}

}  // namespace

void Checkpoint::write_file(const std::string& path, Env* env, const detail::PiecesOf& of) const {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata = state_metadata(state, of);
  prepare_to_read();
  for (const auto& object : objects_) {
    const std::string& name = object->name;
    const std::string prefix = name + "/";
    metadata[kObjectPrefix + name] = object->kind;
    if (object->kind == kModelKind) {
      const auto module = object->saved_module();
      for (const auto& p : module->named_parameters()) {
        if (in_pieces(*object)) break;  // in the pieces
        tensors.emplace_back(prefix + p.key(), p.value().detach());
      }
      for (const auto& b : module->named_buffers())
        tensors.emplace_back(prefix + b.key(), b.value().detach());
    } else if (object->kind == kOptimizerKind) {
      const torch::optim::Optimizer& optimizer = *object->optimizer;
      const ParameterNames names(*find(object->model)->saved_module());
      check_optimizer_of(name, optimizer, object->model, names);
      const std::string kind = detail::optimizer_kind(optimizer);
      const std::string entry = kObjectPrefix + prefix;
      metadata[entry + "class"] = kind;
      metadata[entry + "model"] = object->model;
      const bool legacy = name == kLegacyOptimizer && object->model == kLegacyModel;
      if (legacy) metadata[kLegacyOptimizer] = kind;
      const auto& groups = optimizer.param_groups();
      for (size_t g = 0; g < groups.size(); ++g) {
        const std::string lr = double_text(groups[g].options().get_lr());
        metadata[entry + "lr/" + std::to_string(g)] = lr;
        if (legacy) metadata[kLegacyLearningRate + std::to_string(g)] = lr;
      }
      if (in_pieces(*object)) continue;  // its slots are in the pieces
      for (const auto& [impl, slots] : detail::export_slots(optimizer)) {
        const std::string& parameter = *names.find(impl);  // checked above
        for (const auto& [slot, t] : slots)
          tensors.emplace_back(prefix + parameter + "/" + slot, t);
      }
    } else if (object->kind == kHookKind) {
      write_hook_state(name, *object->hook, object->job->workers(), *object->gathered, tensors,
                       metadata);
    } else {
      tensors.emplace_back(name, object->value.detach());
    }
  }
  if (save_random_state) tensors.emplace_back(kRandom, random_state());
  detail::seal_checkpoint(tensors, metadata);
  save_safetensors(path, tensors, metadata, env);
}

namespace {

// What read() will change, gathered (and checked) before it changes anything.
struct ModelRestore {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<DistributedVariables> variables;  // if placed by a strategy
  std::vector<at::Tensor> parameters;               // in named_parameters() order
  std::vector<at::Tensor> buffers;                  // in named_buffers() order
};
struct OptimizerRestore {
  torch::optim::Optimizer* optimizer;
  detail::ParameterSlots slots;
  std::vector<double> learning_rates;
  std::shared_ptr<DistributedVariables> variables;  // of its model, if placed by a strategy
};

// Takes tensors out of the file's, checking their shapes and dtypes; leftovers are tensors
// that no object here has.
class TensorTaker {
 public:
  TensorTaker(std::string path, detail::CheckedTensors tensors)
      : path_(std::move(path)),
        tensors_(std::move(tensors.tensors)),
        whole_shapes_(std::move(tensors.whole_shapes)) {}

  at::Tensor take(const std::string& object, const std::string& name, const at::Tensor& like,
                  const char* what) {
    return take(object, name, like.sizes(), like.scalar_type(), what);
  }
  at::Tensor take(const std::string& object, const std::string& name, at::IntArrayRef sizes,
                  at::ScalarType dtype, const char* what) {
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      fail(path_, "object '" + object + "': tensor '" + name +
                      "' is missing; was it written for a different " + what + "?");
    const auto shape = whole_shape(name);
    if (at::IntArrayRef(shape) != sizes || it->second.scalar_type() != dtype)
      fail(path_, detail::concat("object '", object, "': tensor '", name, "' is ",
                                 at::IntArrayRef(shape), " ", it->second.scalar_type(), " but the ",
                                 what, " has ", sizes, " ", dtype));
    at::Tensor t = it->second;
    tensors_.erase(it);
    return t;
  }
  // Every tensor whose name starts with `prefix`, by the rest of its name.
  std::map<std::string, at::Tensor> take_all(const std::string& prefix) {
    std::map<std::string, at::Tensor> taken;
    for (auto it = tensors_.lower_bound(prefix);
         it != tensors_.end() && starts_with(it->first, prefix);) {
      taken[it->first.substr(prefix.size())] = it->second;
      it = tensors_.erase(it);
    }
    return taken;
  }
  std::optional<at::Tensor> take_if_present(const std::string& name) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    at::Tensor t = it->second;
    tensors_.erase(it);
    return t;
  }
  const std::map<std::string, at::Tensor>& left() const { return tensors_; }
  // Of the tensors whose names start with `prefix`, those read as a range: their whole shapes.
  std::map<std::string, std::vector<int64_t>> ranged_under(const std::string& prefix) const {
    std::map<std::string, std::vector<int64_t>> found;
    for (auto it = whole_shapes_.lower_bound(prefix);
         it != whole_shapes_.end() && starts_with(it->first, prefix); ++it)
      found[it->first.substr(prefix.size())] = it->second;
    return found;
  }
  // The shape of tensor `name` in the file: a tensor read as a range holds only that range.
  std::vector<int64_t> whole_shape(const std::string& name) const {
    auto ranged = whole_shapes_.find(name);
    if (ranged != whole_shapes_.end()) return ranged->second;
    auto it = tensors_.find(name);
    return it == tensors_.end() ? std::vector<int64_t>{} : it->second.sizes().vec();
  }

 private:
  std::string path_;
  std::map<std::string, at::Tensor> tensors_;
  std::map<std::string, std::vector<int64_t>> whole_shapes_;
};

double parse_learning_rate(const std::string& path, const std::map<std::string, std::string>& meta,
                           const std::string& object, const std::string& key) {
  auto lr = meta.find(key);
  if (lr == meta.end())
    fail(path, "object '" + object + "': the learning rate '" + key + "' is missing");
  char* end = nullptr;
  const double value = std::strtod(lr->second.c_str(), &end);
  if (lr->second.empty() || *end != '\0' || !std::isfinite(value) || value < 0)
    fail(path, "object '" + object + "': the learning rate '" + key +
                   "' is not a non-negative number: '" + lr->second + "'");
  return value;
}

}  // namespace

// read() in two phases: a Reading checks the whole file against this Checkpoint's objects and
// takes every value it will write; only then does apply() change anything.
struct Checkpoint::Reading {
  Reading(const Checkpoint& checkpoint, std::string path, const detail::SafetensorsReader& file,
          Env* env);
  void apply(bool restore_random) const;

  TrainingState state;

 private:
  detail::WantedRanges wanted_ranges() const;
  detail::CheckedTensors verified_tensors(const detail::SafetensorsReader& file,
                                          const detail::WantedRanges& wanted) const;
  void take_slots(const Object& model, const std::string& name, const at::Tensor& p,
                  TensorTaker& taker, OptimizerRestore& restore) const;
  void check_objects(const std::map<std::string, FileObject>& in_file,
                     const std::map<std::string, at::Tensor>& all) const;
  void take_models_and_values(TensorTaker& taker);
  void take_optimizers(const std::map<std::string, FileObject>& in_file, TensorTaker& taker);
  void take_random(TensorTaker& taker);
  void take_hooks(const std::map<std::string, FileObject>& in_file, TensorTaker& taker);
  void check_nothing_left(const TensorTaker& taker) const;
  void read_state();

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
    if (save == meta_.end()) fail(path_, "it was written in pieces but names no save of them");
    detail::read_checkpoint_pieces(
        path_,
        {static_cast<int>(parse_int(path_, meta_, detail::kCheckpointPieces)),
         parse_int(path_, meta_, "step"), save->second},
        env, wanted, all);
  }
  const auto in_file = objects_in_file(path_, meta_, all.tensors);
  check_objects(in_file, all.tensors);
  // Check every object's tensors before changing anything.
  TensorTaker taker(path_, std::move(all));
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
    if (object->kind != kModelKind || !object->keeps_shares()) continue;
    const auto shares = object->variables->parameter_shares();
    const auto named = object->saved_module()->named_parameters();
    for (size_t i = 0; i < named.size() && i < shares.size(); ++i) {
      const detail::ElementRange range{shares[i].begin, shares[i].values.numel()};
      (*ranges)[object->name + "/" + named[i].key()] = range;
      for (const auto& optimizer : checkpoint_.objects_)
        if (optimizer->kind == kOptimizerKind && optimizer->model == object->name)
          (*ranges)[optimizer->name + "/" + named[i].key() + "/"] = range;
    }
  }
  // A skipped object's tensors are only checked (their checksums), never held.
  auto skipped = std::make_shared<std::set<std::string>>(checkpoint_.skipped_);
  if (ranges->empty() && skipped->empty()) return nullptr;
  return [ranges, skipped](const std::string& name) -> std::optional<detail::ElementRange> {
    if (skipped->count(owner_of(name)) != 0) return detail::ElementRange{0, 0};
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
  if (format == meta_.end() || format->second != kFormat)
    fail(path_, detail::concat("not a checkpoint of this library (metadata format is '",
                               format == meta_.end() ? "missing" : format->second, "', expected '",
                               kFormat, "')"));
  detail::CheckedTensors all;
  const std::string problem = detail::read_checked_tensors(file, wanted, all);
  if (!problem.empty()) fail(path_, problem);
  return all;
}

// The objects: the same names and kinds here and in the file (bar skipped ones).
void Checkpoint::Reading::check_objects(const std::map<std::string, FileObject>& in_file,
                                        const std::map<std::string, at::Tensor>& all) const {
  for (const auto& object : checkpoint_.objects_) {
    auto it = in_file.find(object->name);
    if (it == in_file.end())
      fail(path_, detail::concat("object '", object->name, "' (a ", object->kind,
                                 ") was added to this Checkpoint but is not in the file; was the "
                                 "file written for other objects?"));
    if (it->second.kind != object->kind)
      fail(path_, detail::concat("object '", object->name, "' is a ", it->second.kind,
                                 " in the file but a ", object->kind, " here"));
  }
  for (const auto& [name, object] : in_file)
    if (checkpoint_.find(name) == nullptr && checkpoint_.skipped_.count(name) == 0)
      fail(path_, detail::concat("object '", name, "' (a ", object.kind,
                                 ") is in the file but was not added to this Checkpoint; add it, "
                                 "or skip(\"",
                                 name, "\") to leave it unread"));
  for (const auto& [name, t] : all) {
    const std::string owner = owner_of(name);
    if (owner != kRandomOwner && in_file.count(owner) == 0)
      fail(path_, "tensor '" + name + "' belongs to no object of the file (object/" + owner +
                      " is missing from the metadata)");
  }
}

void Checkpoint::Reading::take_models_and_values(TensorTaker& taker) {
  for (const auto& object : checkpoint_.objects_) {
    const std::string& name = object->name;
    const std::string prefix = name + "/";
    if (object->kind == kModelKind) {
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
    } else if (object->kind == kTensorKind) {
      values_.emplace_back(object->value, taker.take(name, name, object->value, "tensor"));
    }
  }
}

void Checkpoint::Reading::take_optimizers(const std::map<std::string, FileObject>& in_file,
                                          TensorTaker& taker) {
  for (const auto& object : checkpoint_.objects_) {
    if (object->kind != kOptimizerKind) continue;
    const std::string& name = object->name;
    const FileObject& saved = in_file.at(name);
    const torch::optim::Optimizer& optimizer = *object->optimizer;
    const std::string kind = detail::optimizer_kind(optimizer);
    if (saved.optimizer_class != kind)
      fail(path_, detail::concat("object '", name, "': it holds ", saved.optimizer_class,
                                 " state but the optimizer is ", kind));
    if (saved.model != object->model)
      fail(path_, detail::concat("object '", name, "': the optimizer of model '", saved.model,
                                 "' in the file optimizes model '", object->model, "' here"));
    const Object& model = *checkpoint_.find(object->model);
    const ParameterNames names(*model.saved_module());
    auto name_of = [&](const void* impl) -> std::string {
      const std::string* parameter = names.find(impl);
      DIST_CHECK_ARG(parameter != nullptr, "Checkpoint: optimizer '", name,
                     "' updates a parameter that is not in its model '", object->model,
                     "'; add the optimizer with the model its parameters belong to");
      return *parameter;
    };
    OptimizerRestore restore{object->optimizer, {}, {}, model.variables};
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
        optimizer, restore.slots, name_of,
        [&](const std::string& message) { fail(path_, "object '" + name + "': " + message); },
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
                                     const at::Tensor& p, TensorTaker& taker,
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
    fail(path_,
         detail::concat("tensor '", prefix, slot, "' is ",
                        at::IntArrayRef(whole != ranged.end() ? whole->second : t.sizes().vec()),
                        " but its parameter is ", at::IntArrayRef(sizes),
                        "; was it written for a different model?"));
  }
  restore.slots.emplace_back(p.unsafeGetTensorImpl(), std::move(slots));
}

void Checkpoint::Reading::take_random(TensorTaker& taker) {
  auto taken = taker.take_if_present(kRandom);
  if (!taken) return;
  // LibTorch checks a generator state (size, dtype, mt19937 invariants) only while setting
  // it, with c10::Error: try it on a scratch generator, before anything has changed.
  try {
    at::make_generator<at::CPUGeneratorImpl>().set_state(*taken);
  } catch (const c10::Error& e) {
    fail(path_, detail::concat("tensor '", kRandom, "' is not a CPU random generator state (",
                               e.what_without_backtrace(), ")"));
  }
  random_ = *taken;
}

// This worker's state of each hook; the other workers' are theirs to take.
void Checkpoint::Reading::take_hooks(const std::map<std::string, FileObject>& in_file,
                                     TensorTaker& taker) {
  for (const auto& object : checkpoint_.objects_) {
    if (object->kind != kHookKind) continue;
    const std::string& name = object->name;
    const FileObject& saved = in_file.at(name);
    if (saved.hook != object->hook->name())
      fail(path_, detail::concat("object '", name, "': it holds the state of communication hook '",
                                 saved.hook, "' but the hook here is '", object->hook->name(),
                                 "'; resume with the same gradient compression"));
    const int workers = object->job->workers();
    if (saved.workers != workers)
      fail(path_, detail::concat("object '", name, "': it holds the state of ", saved.workers,
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

void Checkpoint::Reading::check_nothing_left(const TensorTaker& taker) const {
  for (const auto& [name, t] : taker.left()) {
    const std::string owner = owner_of(name);
    const Object* object = checkpoint_.find(owner);
    if (object == nullptr) continue;  // a skipped object's
    fail(path_,
         detail::concat(
             "object '", owner, "': tensor '", name, "' is not in the ", object->kind,
             object->kind == kOptimizerKind ? " (a slot of a parameter it does not update)" : "",
             "; was it written for a different model?"));
  }
}

void Checkpoint::Reading::read_state() {
  state.step = parse_int(path_, meta_, "step");
  state.epoch = parse_int(path_, meta_, "epoch");
  state.position.epoch = parse_int(path_, meta_, "position.epoch");
  state.position.elements = parse_int(path_, meta_, "position.elements");
  for (const auto& [key, value] : meta_)
    if (starts_with(key, kValuePrefix)) state.values[key.substr(sizeof(kValuePrefix) - 1)] = value;
}

namespace {

// The shares of the slots, to the strategy that keeps them, by parameter index.
void restore_slot_shares(const OptimizerRestore& restore) {
  const auto params = restore.variables->primary()->parameters();
  std::map<const void*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = i;
  std::map<size_t, std::map<std::string, at::Tensor>> shares;
  for (const auto& [impl, slots] : restore.slots)
    if (!slots.empty()) shares[index.at(impl)] = slots;
  restore.variables->restore_slot_shares(*restore.optimizer, shares);
}

}  // namespace

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
    detail::import_slots(*restore.optimizer, restore.slots);
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

// ---- CheckpointManager --------------------------------------------------------------------

namespace {

constexpr char kPointer[] = "checkpoint";

std::string checkpoint_name(int64_t step) {
  return "ckpt-" + std::to_string(step) + ".safetensors";
}

struct Pointer {
  std::string latest;
  std::vector<std::string> kept;  // oldest first
};

std::optional<Pointer> read_pointer(Env* env, const std::string& directory) {
  const std::string path = directory + "/" + kPointer;
  if (!env->file_exists(path)) return std::nullopt;
  auto file = env->new_random_access_file(path);
  std::string text(file->size(), '\0');
  file->read(0, text.size(), text.data());
  try {
    auto json = nlohmann::json::parse(text);
    Pointer pointer{json.at("latest").get<std::string>(),
                    json.at("kept").get<std::vector<std::string>>()};
    for (const auto& name : pointer.kept)
      if (name.find('/') != std::string::npos) throw std::runtime_error("a name holds '/'");
    if (pointer.latest.find('/') != std::string::npos) throw std::runtime_error("a name holds '/'");
    return pointer;
  } catch (const std::exception& e) {
    throw DataError(detail::concat("checkpoint pointer file '", path, "' is damaged (", e.what(),
                                   "); delete it to start over, or "
                                   "point it at a checkpoint by hand"));
  }
}

// Removes a file that is no longer needed; a failure only leaves it behind, so it is ignored.
void remove_quietly(Env* env, const std::string& path) {
  try {
    env->remove_file(path);
  } catch (const DataError&) {
  }
}

}  // namespace

CheckpointManager::CheckpointManager(std::string directory, int max_to_keep, Env* env)
    : directory_(std::move(directory)), max_to_keep_(max_to_keep), env_(env) {
  DIST_CHECK_ARG(!directory_.empty(), "CheckpointManager: the directory is empty");
  DIST_CHECK_ARG(max_to_keep_ >= 1, "CheckpointManager: max_to_keep must be at least 1, got ",
                 max_to_keep_);
  DIST_CHECK_ARG(env_ != nullptr, "CheckpointManager: the Env is null");
  try {
    env_->create_dirs(directory_);
  } catch (const DataError& e) {
    throw DataError(detail::concat("cannot create checkpoint directory: ", e.what()));
  }
}

std::optional<std::string> CheckpointManager::latest() const {
  auto pointer = read_pointer(env_, directory_);
  if (!pointer) return std::nullopt;
  return directory_ + "/" + pointer->latest;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> paths;
  if (auto pointer = read_pointer(env_, directory_))
    for (const auto& name : pointer->kept) paths.push_back(directory_ + "/" + name);
  return paths;
}

std::string CheckpointManager::save(const Checkpoint& checkpoint) {
  const std::string name = checkpoint_name(checkpoint.state.step);
  // In pieces, every worker writes its own and the chief runs keep() once all are written.
  checkpoint.write_then(directory_ + "/" + name, env_, [&] { keep(name); });
  return directory_ + "/" + name;
}

void CheckpointManager::keep(const std::string& name) {
  Pointer pointer = read_pointer(env_, directory_).value_or(Pointer{});
  // Leftovers of an interrupted save (any process): temporary files never renamed. After the
  // write, which waited for every worker's piece, so none is still being written.
  const std::vector<std::string> children = env_->get_children(directory_);
  for (const std::string& child : children) {
    if (child.find(".tmp.") != std::string::npos &&
        (child.rfind("ckpt-", 0) == 0 || child.rfind(kPointer, 0) == 0))
      remove_quietly(env_, directory_ + "/" + child);
  }

  std::vector<std::string> kept;
  for (const auto& old : pointer.kept)
    if (old != name) kept.push_back(old);
  kept.push_back(name);
  std::vector<std::string> dropped;
  while (static_cast<int>(kept.size()) > max_to_keep_) {
    dropped.push_back(kept.front());
    kept.erase(kept.begin());
  }
  const std::string text = nlohmann::json{{"latest", name}, {"kept", kept}}.dump() + "\n";
  detail::write_file_atomically(env_, directory_ + "/" + kPointer, "checkpoint pointer file",
                                [&](WritableFile& file) { file.append(text.data(), text.size()); });
  // Only now, with the new checkpoint complete and pointed to, delete the oldest.
  for (const auto& old : dropped) {
    remove_quietly(env_, directory_ + "/" + old);
    for (const auto& child : children)
      if (detail::is_checkpoint_piece(child, old)) remove_quietly(env_, directory_ + "/" + child);
  }
}

}  // namespace dist
