// MirroredOptimizer: one LibTorch optimizer over a model's distributed variables.
//
// In the step function, after loss.backward(), call apply_gradients(): the strategy combines
// the gradients of all replicas (a sum across replicas: scale the loss by the global batch
// size with compute_average_loss), applies one optimizer step so that every copy holds the
// same new values, and clears the gradients for the next step.
#pragma once

#include <memory>

#include <torch/optim/optimizer.h>

#include "dist/distribute/distributed_variables.h"

namespace dist {

class MirroredOptimizer {
 public:
  MirroredOptimizer(std::shared_ptr<DistributedVariables> variables,
                    std::unique_ptr<torch::optim::Optimizer> optimizer);

  // All-reduces the gradients, takes one optimizer step, clears the gradients. Call it from
  // every replica inside run() (it is a collective), or once in cross-replica code.
  void apply_gradients();

  // Clears the gradients of every copy without applying them.
  void zero_grad();

  // The optimizer over the variables' trainable_variables(): its state (slots) and options.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  DistributedVariables& variables() const { return *variables_; }

  // Learning rate of every parameter group (the first group's when read).
  double learning_rate() const;
  void set_learning_rate(double lr);

 private:
  std::shared_ptr<DistributedVariables> variables_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace dist
