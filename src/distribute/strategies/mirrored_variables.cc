// MirroredVariables: the placement MirroredExtended gives a model (one module per local
// replica over replica 0's parameter storage; see mirrored_extended.cc for a step). Its reads,
// writes and restores go through the model's step plan and, at stage 3, its parameter shards.
#include <torch/nn/module.h>

#include "dist/core/error.h"
#include "distribute/step/sharded_step.h"
#include "distribute/strategies/mirrored_extended.h"

namespace dist {

MirroredVariables::MirroredVariables(std::shared_ptr<MirroredExtended> owner,
                                     std::vector<std::shared_ptr<torch::nn::Module>> replicas)
    : replicas_(std::move(replicas)), owner_(std::move(owner)) {}

void MirroredVariables::sync_from_primary() {
  // Parameters share the primary's storage; buffers are per copy.
  torch::NoGradGuard no_grad;
  const auto primary_buffers = replicas_.front()->buffers();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    auto buffers = replicas_[r]->buffers();
    for (size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(primary_buffers[b]);
  }
}

std::vector<int64_t> MirroredVariables::parameter_sizes(const at::Tensor& parameter) const {
  return parameter_shards_ ? parameter_shards_->sizes(parameter) : parameter.sizes().vec();
}

void MirroredVariables::restore(const std::vector<at::Tensor>& parameters,
                                const std::vector<at::Tensor>& buffers) {
  if (!parameter_shards_) return restore_in_primary(parameters, buffers);
  // Stage 3 keeps one replica per worker: primary() is the only copy.
  at::NoGradGuard no_grad;
  if (step_plan_) step_plan_->prepare_to_write();
  const auto own_parameters = primary()->parameters();
  for (size_t p = 0; p < parameters.size(); ++p)
    parameter_shards_->restore(own_parameters.at(p), parameters[p]);
  auto own_buffers = primary()->buffers();
  for (size_t b = 0; b < buffers.size(); ++b) own_buffers.at(b).copy_(buffers[b]);
}

DistributedVariables::ShareWorkers MirroredVariables::share_workers() const {
  const std::shared_ptr<MirroredExtended> owner = owner_;
  return {owner->worker_index(), owner->num_workers(), owner->is_chief(),
          [owner](std::vector<at::Tensor>& tensors, ReduceOp op) {
            owner->all_reduce_across_workers(tensors, op);
          }};
}

std::vector<DistributedVariables::Share> MirroredVariables::parameter_shares() const {
  std::vector<Share> shares;
  if (!parameter_shards_) return shares;
  for (const auto& p : primary()->parameters())
    shares.push_back({parameter_shards_->begin(p), parameter_shards_->current_share(p)});
  return shares;
}

std::map<size_t, std::map<std::string, at::Tensor>> MirroredVariables::slot_shares(
    torch::optim::Optimizer& optimizer) {
  std::map<size_t, std::map<std::string, at::Tensor>> shares;
  if (!parameter_shards_) return shares;
  const auto by_parameter = step_plan_->slot_shares(optimizer, *parameter_shards_);
  const auto params = primary()->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = by_parameter.find(params[i].unsafeGetTensorImpl());
    if (it != by_parameter.end()) shares[i] = it->second;
  }
  return shares;
}

void MirroredVariables::restore_slot_shares(
    torch::optim::Optimizer& optimizer,
    const std::map<size_t, std::map<std::string, at::Tensor>>& shares) {
  if (!parameter_shards_) return;
  const auto params = primary()->parameters();
  SlotShares by_parameter;
  for (const auto& [i, slots] : shares) by_parameter[params.at(i).unsafeGetTensorImpl()] = slots;
  step_plan_->restore_slot_shares(optimizer, std::move(by_parameter));
}

StrategyExtended& MirroredVariables::strategy() const { return *owner_; }

std::vector<HostSharedVariables::Holders> MirroredVariables::parameter_holders() const {
  std::vector<std::vector<at::Tensor>> copies;
  for (const auto& replica : replicas_) copies.push_back(replica->parameters());
  std::vector<HostSharedVariables::Holders> values(copies[0].size());
  for (size_t i = 0; i < values.size(); ++i)
    for (const auto& copy : copies) values[i].push_back(copy[i]);
  return values;
}

void MirroredVariables::prepare_to_read_slots(torch::optim::Optimizer& optimizer) {
  step_plan_->read_slots(optimizer);
}

void MirroredVariables::gather_slots(torch::optim::Optimizer& optimizer) {
  step_plan_->gather_slots(optimizer);
}

void MirroredVariables::gather_values() {
  if (parameter_shards_) parameter_shards_->gather_all();
}

void MirroredVariables::prepare_to_read() {
  if (!parameter_shards_ || parameter_shards_->all_whole()) return;
  if (owner_->num_workers() == 1) {
    parameter_shards_->gather_all();  // a collective of one
    return;
  }
  throw InvalidArgument(detail::concat(
      "the parameters are sharded between the ", owner_->num_workers(),
      " workers (sharding 'parameters') and were not gathered since the last step; call "
      "variables().gather_values() (a keras::Model's gather_weights()) on every worker before "
      "one of them reads them (a Checkpoint needs none: every worker writes its piece)"));
}

void MirroredVariables::prepare_to_write() {
  // Every worker restores the same values: each gathers (so that a parameter the restore does
  // not write keeps its value), and the next forward takes the written values as its chunks.
  gather_values();
  if (step_plan_) step_plan_->prepare_to_write();
}

MirroredVariables::~MirroredVariables() {
  // The modules outlive this placement: they must not keep writing into memory that other
  // processes read (a later strategy would step them whole on every worker).
  try {
    if (step_plan_) step_plan_->prepare_to_write();
  } catch (...) {  // cloning failed (out of memory): nothing better to do in a destructor
  }
}

}  // namespace dist
