#include "dist/models/cyclegan.h"

#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "dist/core/error.h"
#include "dist/distribute/model_gradients.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"

namespace dist::models {
namespace {

using keras::KerasTensor;
using namespace keras::layers;  // NOLINT: layer names read better unqualified here

void check_options(const CycleGanOptions& o) {
  const int64_t s = o.image_size;
  DIST_CHECK_ARG(s >= 16 && s <= 256 && (s & (s - 1)) == 0,
                 "CycleGanOptions::image_size must be a power of two from 16 to 256, got ", s);
  DIST_CHECK_ARG(o.channels == 1 || o.channels == 3,
                 "CycleGanOptions::channels must be 1 or 3, got ", o.channels);
  DIST_CHECK_ARG(o.generator_filters >= 1 && o.discriminator_filters >= 1,
                 "CycleGanOptions: filter counts must be at least 1, got ", o.generator_filters,
                 " and ", o.discriminator_filters);
  DIST_CHECK_ARG(o.optimizer == "adam" || o.optimizer == "sgd",
                 "CycleGanOptions::optimizer must be \"adam\" or \"sgd\", got \"", o.optimizer,
                 "\"");
  DIST_CHECK_ARG(o.learning_rate > 0, "CycleGanOptions::learning_rate must be above 0, got ",
                 o.learning_rate);
}

// Strided 4x4 convolution halving the size, instance normalization, leaky ReLU (pix2pix).
KerasTensor downsample(const KerasTensor& x, int64_t filters, bool normalize) {
  KerasTensor y = Conv2D(filters, 4).strides(2).padding("same").use_bias(false)(x);
  if (normalize) y = InstanceNormalization()(y);
  return LeakyReLU()(y);
}

// Transposed 4x4 convolution doubling the size, instance normalization, dropout, ReLU.
KerasTensor upsample(const KerasTensor& x, int64_t filters, double dropout, uint64_t seed) {
  KerasTensor y = Conv2DTranspose(filters, 4).strides(2).padding("same").use_bias(false)(x);
  y = InstanceNormalization()(y);
  if (dropout > 0) y = Dropout(dropout).seed(seed)(y);
  return ReLU()(y);
}

// Per-example adversarial loss of logits against an all-real (1) or all-fake (0) target.
at::Tensor adversarial(const at::Tensor& logits, bool real, bool least_squares) {
  at::Tensor target = real ? at::ones_like(logits) : at::zeros_like(logits);
  at::Tensor per_patch = least_squares ? (logits - target).pow(2)
                                       : at::binary_cross_entropy_with_logits(
                                             logits, target, {}, {}, at::Reduction::None);
  return per_patch.flatten(1).mean(1);
}

// Per-example mean absolute difference.
at::Tensor mean_absolute(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().flatten(1).mean(1);
}

void check_batch(const at::Tensor& t, const char* what, const CycleGanOptions& o) {
  DIST_CHECK_ARG(t.defined() && t.dim() == 4 && t.size(1) == o.channels &&
                     t.size(2) == o.image_size && t.size(3) == o.image_size,
                 "CycleGan: ", what, " must be a batch [n, ", o.channels, ", ", o.image_size, ", ",
                 o.image_size, "], got ", t.defined() ? t.sizes() : at::IntArrayRef{});
}

std::shared_ptr<MirroredOptimizer> make_optimizer(const Strategy& strategy,
                                                  const Mirrored<keras::Functional>& model,
                                                  const CycleGanOptions& o) {
  if (o.optimizer == "sgd")
    return strategy.mirror_optimizer<torch::optim::SGD>(model,
                                                        torch::optim::SGDOptions(o.learning_rate));
  return strategy.mirror_optimizer<torch::optim::Adam>(
      model, torch::optim::AdamOptions(o.learning_rate).betas({o.beta1, 0.999}));
}

}  // namespace

keras::Functional unet_generator(const CycleGanOptions& options) {
  check_options(options);
  const CycleGanOptions& o = options;
  KerasTensor input = keras::Input({o.channels, o.image_size, o.image_size});
  // Down to 1x1: filters f, 2f, 4f, 8f, 8f, ... (capped at 8f, as pix2pix caps at 512).
  std::vector<KerasTensor> skips;
  KerasTensor x = input;
  int64_t filters = o.generator_filters;
  for (int64_t size = o.image_size; size > 1; size /= 2) {
    x = downsample(x, filters, /*normalize=*/size != o.image_size);
    skips.push_back(x);
    filters = std::min(filters * 2, o.generator_filters * 8);
  }
  skips.pop_back();  // the 1x1 bottleneck is x itself
  // Back up, joining each down-sampling block's output of the same size.
  for (size_t i = 0; i < skips.size(); ++i) {
    const KerasTensor& skip = skips[skips.size() - 1 - i];
    const double rate = i < 3 ? o.dropout : 0.0;
    x = upsample(x, skip.shape()[0], rate, o.dropout_seed * 1000003 + i);
    x = Concatenate()({x, skip});
  }
  KerasTensor output =
      Conv2DTranspose(o.channels, 4).strides(2).padding("same").activation("tanh")(x);
  return keras::Functional(input, output);
}

keras::Functional patch_discriminator(const CycleGanOptions& options) {
  check_options(options);
  const CycleGanOptions& o = options;
  const int64_t f = o.discriminator_filters;
  KerasTensor input = keras::Input({o.channels, o.image_size, o.image_size});
  // pix2pix's discriminator with two down-sampling blocks instead of three (small images):
  // S -> S/4, then two unstrided 4x4 convolutions give a grid of (S/4 - 2) x (S/4 - 2) logits.
  KerasTensor x = downsample(input, f, /*normalize=*/false);
  x = downsample(x, 2 * f, /*normalize=*/true);
  x = ZeroPadding2D(1)(x);
  x = Conv2D(4 * f, 4).use_bias(false)(x);
  x = LeakyReLU()(InstanceNormalization()(x));
  x = ZeroPadding2D(1)(x);
  KerasTensor logits = Conv2D(1, 4)(x);
  return keras::Functional(input, logits);
}

CycleGan::CycleGan(const Strategy& strategy, const CycleGanOptions& options)
    : generator_g(strategy.mirror(unet_generator(options))),
      generator_f(strategy.mirror(unet_generator(options))),
      discriminator_x(strategy.mirror(patch_discriminator(options))),
      discriminator_y(strategy.mirror(patch_discriminator(options))),
      generator_g_optimizer(make_optimizer(strategy, generator_g, options)),
      generator_f_optimizer(make_optimizer(strategy, generator_f, options)),
      discriminator_x_optimizer(make_optimizer(strategy, discriminator_x, options)),
      discriminator_y_optimizer(make_optimizer(strategy, discriminator_y, options)),
      options_(options) {}

std::map<std::string, at::Tensor> CycleGan::train_step(const at::Tensor& x, const at::Tensor& y) {
  check_batch(x, "x", options_);
  check_batch(y, "y", options_);
  const bool ls = options_.least_squares;
  const double lambda = options_.lambda_cycle;
  // This replica's copies only: another replica may be in the middle of its own step.
  for (auto* m : {&generator_g, &generator_f, &discriminator_x, &discriminator_y})
    (*m)->train(true);

  at::Tensor fake_y = generator_g->forward(x);
  at::Tensor cycled_x = generator_f->forward(fake_y);
  at::Tensor fake_x = generator_f->forward(y);
  at::Tensor cycled_y = generator_g->forward(fake_x);
  at::Tensor same_x = generator_f->forward(x);  // identity mappings
  at::Tensor same_y = generator_g->forward(y);

  at::Tensor disc_real_x = discriminator_x->forward(x);
  at::Tensor disc_real_y = discriminator_y->forward(y);
  at::Tensor disc_fake_x = discriminator_x->forward(fake_x);
  at::Tensor disc_fake_y = discriminator_y->forward(fake_y);

  // Per-example losses, each averaged over the global batch (compute_average_loss), so the
  // replicas' gradients sum to the global batch's.
  auto average = [](const at::Tensor& per_example) { return compute_average_loss(per_example); };
  at::Tensor cycle = average(lambda * (mean_absolute(x, cycled_x) + mean_absolute(y, cycled_y)));
  at::Tensor gen_g = average(adversarial(disc_fake_y, true, ls));
  at::Tensor gen_f = average(adversarial(disc_fake_x, true, ls));
  at::Tensor identity_g = average(0.5 * lambda * mean_absolute(y, same_y));
  at::Tensor identity_f = average(0.5 * lambda * mean_absolute(x, same_x));
  at::Tensor total_g = gen_g + cycle + identity_g;
  at::Tensor total_f = gen_f + cycle + identity_f;
  at::Tensor disc_x =
      average(0.5 * (adversarial(disc_real_x, true, ls) + adversarial(disc_fake_x, false, ls)));
  at::Tensor disc_y =
      average(0.5 * (adversarial(disc_real_y, true, ls) + adversarial(disc_fake_y, false, ls)));

  // Each loss reaches models it must not train (the generators' losses go through the
  // discriminators, the cycle loss through both generators): each model takes the gradient
  // of its own loss only, as tape.gradient(loss, model.trainable_variables) does.
  backward(total_g, generator_g);
  backward(total_f, generator_f);
  backward(disc_x, discriminator_x);
  backward(disc_y, discriminator_y, BackwardOptions{/*retain_graph=*/false});
  generator_g_optimizer->apply_gradients();
  generator_f_optimizer->apply_gradients();
  discriminator_x_optimizer->apply_gradients();
  discriminator_y_optimizer->apply_gradients();

  return {{"loss_G/loss", gen_g.detach()},          {"loss_G/cycle", cycle.detach()},
          {"loss_G/identity", identity_g.detach()}, {"loss_G/total", total_g.detach()},
          {"loss_F/loss", gen_f.detach()},          {"loss_F/cycle", cycle.detach()},
          {"loss_F/identity", identity_f.detach()}, {"loss_F/total", total_f.detach()},
          {"loss_X/loss", disc_x.detach()},         {"loss_Y/loss", disc_y.detach()}};
}

void CycleGan::add_to(Checkpoint& checkpoint) const {
  checkpoint.add("generator_g", generator_g)
      .add("generator_f", generator_f)
      .add("discriminator_x", discriminator_x)
      .add("discriminator_y", discriminator_y)
      .add("generator_g_optimizer", generator_g_optimizer)
      .add("generator_f_optimizer", generator_f_optimizer)
      .add("discriminator_x_optimizer", discriminator_x_optimizer)
      .add("discriminator_y_optimizer", discriminator_y_optimizer);
}

std::map<std::string, at::Tensor> CycleGan::test_step(const at::Tensor& x, const at::Tensor& y) {
  check_batch(x, "x", options_);
  check_batch(y, "y", options_);
  torch::NoGradGuard no_grad;
  for (auto* m : {&generator_g, &generator_f}) (*m)->train(false);  // this replica's copies
  auto average = [](const at::Tensor& per_example) { return compute_average_loss(per_example); };
  std::map<std::string, at::Tensor> errors{
      {"MAE(X, F(G(X)))", average(mean_absolute(x, generator_f->forward(generator_g->forward(x))))},
      {"MAE(X, F(X))", average(mean_absolute(x, generator_f->forward(x)))},
      {"MAE(Y, G(F(Y)))", average(mean_absolute(y, generator_g->forward(generator_f->forward(y))))},
      {"MAE(Y, G(Y))", average(mean_absolute(y, generator_g->forward(y)))}};
  for (auto* m : {&generator_g, &generator_f}) (*m)->train(true);
  return errors;
}

}  // namespace dist::models
