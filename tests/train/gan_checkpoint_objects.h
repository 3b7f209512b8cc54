// The objects of tests/train/named_checkpoint_test.cc and named_checkpoint_errors_test.cc: a
// small CycleGAN's four models, four Adam optimizers and a tensor (Gan), two of them mirrored
// by a strategy (MirroredPair), and every value they hold, compared bit for bit.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/train/checkpoint.h"

namespace dist::gan_checkpoint {

using torch::nn::Sequential;

// Seeded: the same seed gives the same initial values.
Sequential generator(int seed, int width = 4);
Sequential discriminator(int seed);

// CycleGAN's objects: generators G (x to y) and F (y to x), discriminators of x and y, an Adam
// optimizer for each, and the cycle loss weight as a tensor.
struct Gan {
  explicit Gan(int seed);

  Checkpoint checkpoint() { return checkpoint_except({}); }
  // Every object but those named in `left_out` (for the caller to add something else in
  // their place), models before optimizers.
  Checkpoint checkpoint_except(const std::set<std::string>& left_out);
  std::vector<torch::optim::Optimizer*> optimizers() const;
  // `steps` steps of both losses on inputs from the default generator.
  void train(int steps);

  Sequential generator_g, generator_f, discriminator_x, discriminator_y;
  std::unique_ptr<torch::optim::Adam> generator_g_optimizer, generator_f_optimizer,
      discriminator_x_optimizer, discriminator_y_optimizer;
  torch::Tensor lambda;
};

// Every value of a module: parameters, then buffers.
std::vector<torch::Tensor> values_of(const torch::nn::Module& module);
// An Adam optimizer's state in parameter order: step (as a tensor), exp_avg, exp_avg_sq,
// max_exp_avg_sq (undefined without amsgrad); an empty list for a parameter without state.
std::vector<torch::Tensor> adam_state(const torch::optim::Optimizer& optimizer);
// Everything a Gan holds, in a fixed order.
std::vector<torch::Tensor> everything(const Gan& gan);
// Bit for bit (an undefined tensor equals only an undefined one).
void expect_identical(const std::vector<torch::Tensor>& actual,
                      const std::vector<torch::Tensor>& expected);
bool differs(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b);

// A generator and a discriminator mirrored by `strategy`, each with an Adam optimizer.
struct MirroredPair {
  explicit MirroredPair(const Strategy& strategy, int seed);

  Checkpoint checkpoint();
  // Each replica's batch depends on its id only: the same global batch for any replica count.
  void train(const Strategy& strategy, int steps);

  Mirrored<Sequential> generator_g, discriminator_x;
  std::shared_ptr<MirroredOptimizer> generator_g_optimizer, discriminator_x_optimizer;
  torch::Tensor lambda;
};

std::vector<torch::Tensor> everything(MirroredPair& pair);

}  // namespace dist::gan_checkpoint
