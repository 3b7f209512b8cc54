// What a Model saves and restores (dist/keras/model.h): its weights (read, set, and as a
// safetensors file), and the Checkpoint and TrainingState that let fit resume.
#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "dist/keras/model.h"
#include "dist/train/safetensors.h"
#include "keras/model_state.h"

namespace dist::keras {

std::vector<std::pair<std::string, at::Tensor>> Model::weights() const {
  // Under ParameterServerStrategy the current values are on the ps tasks.
  if (state_->mirrored) state_->mirrored->variables().prepare_to_read();
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& item : state_->module->named_parameters())
    weights.emplace_back(item.key(), item.value());
  for (const auto& item : state_->module->named_buffers())
    if (item.value().is_floating_point()) weights.emplace_back(item.key(), item.value());
  return weights;
}

void Model::set_weights(const std::vector<std::pair<std::string, at::Tensor>>& weights) {
  // Check everything before changing anything. Every worker calls it (prepare_to_write below is
  // a collective where the strategy keeps shares), so the shapes may be read whole here.
  if (state_->mirrored) state_->mirrored->variables().gather_values();
  std::map<std::string, at::Tensor> by_name(weights.begin(), weights.end());
  const auto own = this->weights();
  for (const auto& [name, tensor] : own) {
    auto it = by_name.find(name);
    DIST_CHECK_ARG(it != by_name.end(), "set_weights: model '", state_->name, "' has weight '",
                   name, "' but no value was given for it");
    DIST_CHECK_ARG(it->second.sizes() == tensor.sizes(), "set_weights: weight '", name,
                   "' has shape ", tensor.sizes(), " but the value has shape ", it->second.sizes());
  }
  DIST_CHECK_ARG(by_name.size() == own.size(), "set_weights: ", by_name.size(), " values for the ",
                 own.size(), " weights of model '", state_->name,
                 "'; a name does not belong to the model");
  torch::NoGradGuard no_grad;
  // Into the primary module; the strategy's placement follows.
  if (state_->mirrored) state_->mirrored->variables().prepare_to_write();
  const auto& module = state_->module;
  for (const auto& item : module->named_parameters()) item.value().copy_(by_name.at(item.key()));
  for (const auto& item : module->named_buffers())
    if (item.value().is_floating_point()) item.value().copy_(by_name.at(item.key()));
  if (state_->mirrored) state_->mirrored->variables().sync_from_primary();
}

void Model::gather_weights() {
  if (state_->mirrored) state_->mirrored->variables().gather_values();
}

int64_t Model::weight_numel(const at::Tensor& weight) const {
  if (!state_->mirrored) return weight.numel();
  int64_t numel = 1;
  for (int64_t size : state_->mirrored->variables().parameter_sizes(weight)) numel *= size;
  return numel;
}

void Model::save_weights(const std::string& path) const {
  save_safetensors(path, weights(), {{"format", "dist.keras.weights/1"}, {"model", name()}});
}

void Model::load_weights(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  try {
    set_weights(file.tensors);
  } catch (const InvalidArgument& e) {
    throw DataError(path + ": " + e.what());
  }
}

Checkpoint Model::checkpoint() const {
  detail::check_compiled(*state_, "checkpoint");
  Checkpoint checkpoint(*state_->mirrored, state_->optimizer.get());
  // A hook with state (PowerSGD's error feedback) must resume where it stopped too.
  if (auto hook = state_->strategy.extended().communication_hook())
    checkpoint.add("communication_hook", std::move(hook), state_->strategy);
  return checkpoint;
}

TrainingState Model::training_state() const {
  TrainingState state = state_->progress;
  if (state_->loss_tracker) {
    for (Metric* m : detail::all_metrics(*state_)) {
      auto [total, count] = m->total_and_count();  // a collective: every worker calls it
      state.values[m->name() + ".total"] = nlohmann::json(total).dump();
      state.values[m->name() + ".count"] = nlohmann::json(count).dump();
    }
  }
  return state;
}

int64_t Model::global_step() const { return state_->progress.step; }

void Model::resume_training_at(const TrainingState& state) { state_->resume = state; }

}  // namespace dist::keras
