#include "ps/optimizer_config.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "dist/core/error.h"

namespace dist::ps {

rpc::OptimizerConfig optimizer_config(const torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  DIST_CHECK_ARG(groups.size() == 1, "ParameterServerStrategy: the optimizer has ", groups.size(),
                 " parameter groups; the ps tasks apply one set of options per update: use one "
                 "group");
  const auto& options = groups[0].options();
  rpc::OptimizerConfig config;
  config.set_learning_rate(options.get_lr());
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options)) {
    config.set_kind("SGD");
    config.set_momentum(sgd->momentum());
    config.set_dampening(sgd->dampening());
    config.set_nesterov(sgd->nesterov());
    config.set_weight_decay(sgd->weight_decay());
  } else if (const auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&options)) {
    config.set_kind("Adam");
    config.set_beta1(std::get<0>(adam->betas()));
    config.set_beta2(std::get<1>(adam->betas()));
    config.set_epsilon(adam->eps());
    config.set_weight_decay(adam->weight_decay());
    config.set_amsgrad(adam->amsgrad());
  } else if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradOptions*>(&options)) {
    config.set_kind("Adagrad");
    config.set_learning_rate_decay(adagrad->lr_decay());
    config.set_epsilon(adagrad->eps());
    config.set_weight_decay(adagrad->weight_decay());
    config.set_initial_accumulator_value(adagrad->initial_accumulator_value());
  } else {
    throw InvalidArgument(
        "ParameterServerStrategy: the ps tasks apply SGD, Adam or Adagrad updates; make the "
        "optimizer with one of torch::optim::SGD, Adam or Adagrad");
  }
  return config;
}

}  // namespace dist::ps
