// The object graph of a Checkpoint (dist/train/checkpoint.h): the objects added, checked as
// they are added (names, an optimizer's model), and what they ask of their strategies before a
// write. Writing is checkpoint_writing.cc, reading checkpoint_reading.cc, the file's names
// checkpoint_format.h.
#include "dist/train/checkpoint.h"

#include "dist/core/error.h"
#include "distribute/step/optimizer_slots.h"
#include "train/checkpoint_format.h"
#include "train/checkpoint_object.h"
#include "train/hook_state.h"

namespace dist {

void detail::check_optimizer_of(const std::string& name, const torch::optim::Optimizer& optimizer,
                                const std::string& model, const ParameterNames& names) {
  DIST_CHECK_ARG(names.holds_all(optimizer), "Checkpoint: optimizer '", name,
                 "' updates a parameter that is not in its model '", model,
                 "' (a parameter group added since?); add the optimizer with the model its "
                 "parameters belong to");
}

Checkpoint::Checkpoint(std::shared_ptr<torch::nn::Module> model,
                       torch::optim::Optimizer* optimizer) {
  if (model != nullptr) add(detail::kLegacyModel, std::move(model));
  if (optimizer != nullptr)
    add(detail::kLegacyOptimizer, optimizer, detail::kLegacyModel);
  else
    skip(detail::kLegacyOptimizer);
}

Checkpoint::Checkpoint(std::shared_ptr<DistributedVariables> variables,
                       torch::optim::Optimizer* optimizer) {
  if (variables != nullptr) add(detail::kLegacyModel, std::move(variables));
  if (optimizer != nullptr)
    add(detail::kLegacyOptimizer, optimizer, detail::kLegacyModel);
  else
    skip(detail::kLegacyOptimizer);
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
  DIST_CHECK_ARG(!detail::starts_with(name, "__") && name != detail::kRandomStateOwner,
                 "Checkpoint: object name '", name,
                 "' is reserved (names starting with \"__\" and \"rng\" are the file's own)");
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
  const detail::OptimizerWithKind with(*optimizer);  // its kind, for every write and read
  try {
    detail::listed_kind(with);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(detail::concat("Checkpoint: optimizer '", name, "': ", e.what()));
  }
  if (model.empty()) {
    for (const auto& object : objects_) {
      if (object->kind == detail::kModelKind &&
          detail::ParameterNames(*object->saved_module()).holds_all(*optimizer)) {
        model = object->name;
        break;
      }
    }
    DIST_CHECK_ARG(!model.empty(), "Checkpoint: the parameters of optimizer '", name,
                   "' belong to no model added so far (its slots are named by its model's "
                   "parameter names); add its model first, then the optimizer");
  } else {
    const Object* target = find(model);
    DIST_CHECK_ARG(target != nullptr && target->kind == detail::kModelKind, "Checkpoint: model '",
                   model, "' of optimizer '", name,
                   "' has not been added; add the model first, then the optimizer");
    DIST_CHECK_ARG(detail::ParameterNames(*target->saved_module()).holds_all(*optimizer),
                   "Checkpoint: optimizer '", name, "' updates parameters that are not in model '",
                   model, "'; add the optimizer with the model its parameters belong to");
  }
  auto object = std::make_shared<Object>();
  object->name = name;
  object->kind = detail::kOptimizerKind;
  object->optimizer = optimizer;
  object->optimizer_kind = with.kind;
  object->owner = std::move(owner);
  object->model = std::move(model);
  return append(std::move(object));
}

Checkpoint& Checkpoint::add(const std::string& name, at::Tensor value) {
  check_new_name(name);
  DIST_CHECK_ARG(value.defined(), "Checkpoint: tensor '", name, "' is undefined");
  auto object = std::make_shared<Object>();
  object->name = name;
  object->kind = detail::kTensorKind;
  object->value = std::move(value);
  return append(std::move(object));
}

// Checkpoint::add(name, hook, strategy) is in hook_state.cc.
Checkpoint& Checkpoint::add_hook(const std::string& name, std::shared_ptr<CommunicationHook> hook,
                                 std::shared_ptr<const HookJob> job) {
  check_new_name(name);
  auto object = std::make_shared<Object>();
  object->name = name;
  object->kind = detail::kHookKind;
  object->hook = std::move(hook);
  object->job = std::move(job);
  return append(std::move(object));
}

void Checkpoint::gather_worker_states() {
  for (const auto& object : objects_) {
    // Shares are written in pieces, each worker its own: nothing to gather.
    if (object->variables != nullptr && !object->keeps_shares()) object->variables->gather_values();
    if (object->kind == detail::kHookKind) *object->gathered = object->job->gather();
    if (object->kind == detail::kOptimizerKind && !in_pieces(*object))
      if (const auto& model = find(object->model)->variables)
        model->gather_slots(*object->optimizer);
  }
}

bool Checkpoint::in_pieces(const Object& object) const {
  return object.kind == detail::kOptimizerKind ? find(object.model)->keeps_shares()
                                               : object.keeps_shares();
}

std::optional<DistributedVariables::ShareWorkers> Checkpoint::pieces_job() const {
  std::optional<DistributedVariables::ShareWorkers> job;
  for (const auto& object : objects_) {
    if (object->kind != detail::kModelKind || !object->keeps_shares()) continue;
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

}  // namespace dist
