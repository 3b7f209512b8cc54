#include "dist/distribute/mirrored_optimizer.h"

#include "dist/core/error.h"
#include "dist/distribute/strategy_extended.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

namespace dist {

MirroredOptimizer::MirroredOptimizer(std::shared_ptr<DistributedVariables> variables,
                                     std::unique_ptr<torch::optim::Optimizer> optimizer)
    : variables_(std::move(variables)), optimizer_(std::move(optimizer)) {
  DIST_INTERNAL_ASSERT(variables_ && optimizer_);
}

void MirroredOptimizer::apply_gradients() {
  variables_->strategy().apply_gradients(*variables_, *optimizer_);
}

void MirroredOptimizer::zero_grad() {
  for (int r = 0; r < variables_->num_replicas(); ++r)
    for (auto& p : variables_->replica(r)->parameters()) p.mutable_grad().reset();
}

double MirroredOptimizer::learning_rate() const {
  const auto& groups = optimizer_->param_groups();
  DIST_CHECK_ARG(!groups.empty(), "optimizer has no parameter groups");
  return groups.front().options().get_lr();
}

void MirroredOptimizer::set_learning_rate(double lr) {
  DIST_CHECK_ARG(lr >= 0, "learning rate must be at least 0, got ", lr);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
}

}  // namespace dist
