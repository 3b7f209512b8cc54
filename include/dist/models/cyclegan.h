// CycleGAN (Zhu et al. 2017) as TensorFlow's CycleGAN tutorial trains it, made for a custom
// training loop under any strategy: two generators (G: X -> Y, F: Y -> X), two
// discriminators (D_X, D_Y), four optimizers, and a step that returns its losses by name.
//
//   dist::models::CycleGan gan(strategy, {});
//   auto losses = strategy.run([&](const Element& x, const Element& y) {
//     return gan.train_step(x[0], y[0]);
//   }, x_batch, y_batch);
//   auto totals = strategy.reduce(dist::ReduceOp::kSum, losses);   // {"loss_G/total": ...}
//
// Generators are pix2pix U-Nets (strided 4x4 convolutions down to 1x1, transposed
// convolutions back up with skip connections, instance normalization, dropout in the first
// up-sampling blocks, tanh output); discriminators are PatchGANs (a grid of real/fake logits).
// Both are keras::Functional modules built from dist::keras layers, so every strategy can
// mirror them. Sizes are scaled down from the tutorial's 256x256 for small images.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "dist/distribute/mirrored.h"
#include "dist/distribute/mirrored_optimizer.h"
#include "dist/distribute/strategy.h"
#include "dist/keras/functional.h"

namespace dist {
class Checkpoint;
}

namespace dist::models {

struct CycleGanOptions {
  int64_t image_size = 32;             // square images; a power of two from 16 to 256
  int64_t channels = 1;                // 1 (grey) or 3 (RGB)
  int64_t generator_filters = 16;      // the first down-sampling block's (the tutorial: 64)
  int64_t discriminator_filters = 16;  // the tutorial: 64
  double dropout = 0.5;                // rate in the first three up-sampling blocks
  uint64_t dropout_seed = 0;           // the masks are a function of it (reproducible)
  double lambda_cycle = 10;            // weight of the cycle loss; the identity loss gets half
  bool least_squares = false;          // LSGAN (squared error) instead of cross-entropy from logits
  std::string optimizer = "adam";      // "adam" (beta1 below, beta2 0.999) or "sgd"
  double learning_rate = 2e-4;
  double beta1 = 0.5;
};

// A U-Net generator from and to [channels, image_size, image_size] images in [-1, 1].
keras::Functional unet_generator(const CycleGanOptions& options);
// A PatchGAN discriminator: [channels, S, S] -> [1, P, P] logits.
keras::Functional patch_discriminator(const CycleGanOptions& options);

class CycleGan {
 public:
  // Makes the four models and their optimizers under `strategy`. Weights come from LibTorch's
  // initializers and the global random generator (seed it for reproducible runs); under
  // MultiWorkerMirroredStrategy the chief's values win.
  CycleGan(const Strategy& strategy, const CycleGanOptions& options = {});

  // One replica's step on its share of a global batch of x (domain X) and y (domain Y),
  // [n, C, S, S] in [-1, 1]; call it inside strategy.run() (or outside, under a one-replica
  // strategy). Each model's gradients come from its own loss (dist::backward), then the four
  // optimizers step. Returns this replica's share of every loss, each scaled by the global
  // batch size: summed over the replicas (strategy.reduce(kSum, ...)) they are the global
  // batch's means. Keys: "loss_G/{loss,cycle,identity,total}", the same for "loss_F",
  // "loss_X/loss" and "loss_Y/loss".
  std::map<std::string, at::Tensor> train_step(const at::Tensor& x, const at::Tensor& y);

  // The evaluation-mode errors the tutorial prints, as this replica's shares of the global
  // batch's means: "MAE(X, F(G(X)))", "MAE(X, F(X))", "MAE(Y, G(F(Y)))", "MAE(Y, G(Y))".
  std::map<std::string, at::Tensor> test_step(const at::Tensor& x, const at::Tensor& y);

  // Adds the eight objects under the tutorial's names: generator_g, generator_f,
  // discriminator_x, discriminator_y and each with "_optimizer".
  void add_to(Checkpoint& checkpoint) const;

  const CycleGanOptions& options() const { return options_; }

  Mirrored<keras::Functional> generator_g;  // X -> Y
  Mirrored<keras::Functional> generator_f;  // Y -> X
  Mirrored<keras::Functional> discriminator_x;
  Mirrored<keras::Functional> discriminator_y;
  std::shared_ptr<MirroredOptimizer> generator_g_optimizer;
  std::shared_ptr<MirroredOptimizer> generator_f_optimizer;
  std::shared_ptr<MirroredOptimizer> discriminator_x_optimizer;
  std::shared_ptr<MirroredOptimizer> discriminator_y_optimizer;

 private:
  CycleGanOptions options_;
};

}  // namespace dist::models
