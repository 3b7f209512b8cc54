#include "dist/train/loss_scale_optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <vector>

#include "dist/core/error.h"
#include "dist/distribute/strategy_extended.h"

namespace dist {
namespace {

// Scales are powers of two of at least 1, so that scaling and unscaling are exact.
bool is_valid_scale(double scale) {
  int exponent = 0;
  return scale >= 1 && std::isfinite(scale) && std::frexp(scale, &exponent) == 0.5;
}

}  // namespace

// What the strategy calls as "the optimizer's step" once the gradients are all-reduced: it
// unscales them, checks them, and steps the inner optimizer or not. Strategies only ever call
// step() on the optimizer they are given, so this adapter needs no parameters of its own.
class LossScaleOptimizer::ScaledStep final : public torch::optim::Optimizer {
 public:
  ScaledStep(torch::optim::Optimizer& inner, LossScaleOptions options)
      : torch::optim::Optimizer(std::vector<torch::optim::OptimizerParamGroup>{},
                                std::make_unique<torch::optim::SGDOptions>(0.0)),
        inner_(inner),
        options_(options),
        scale_(options.initial_scale) {}

  at::Tensor step(LossClosure closure) override {
    DIST_CHECK_ARG(closure == nullptr, "LossScaleOptimizer: a loss closure is not supported");
    torch::NoGradGuard no_grad;
    const double inverse = 1.0 / scale_;  // exact: the scale is a power of two
    // One flag for all gradients, read once: a read per parameter would wait for each.
    std::vector<at::Tensor> all_finite;
    for (auto& group : inner_.param_groups()) {
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        at::Tensor& grad = p.mutable_grad();
        grad.mul_(inverse);
        // A fixed scale applies every step whatever the gradients hold: nothing to check.
        if (options_.dynamic) all_finite.push_back(at::isfinite(grad).all());
      }
    }
    const bool finite = all_finite.empty() || at::stack(all_finite).all().item<bool>();
    // A fixed scale (Keras' dynamic=False) applies every step, as Keras does.
    applied_ = finite || !options_.dynamic;
    if (applied_) inner_.step();
    if (!options_.dynamic) return {};
    if (finite) {
      if (++counter_ >= options_.growth_steps) {
        // Keras keeps the old scale when doubling would overflow.
        if (std::isfinite(scale_ * 2)) scale_ *= 2;
        counter_ = 0;
      }
    } else {
      ++skipped_;
      scale_ = std::max(scale_ / 2, 1.0);
      counter_ = 0;
    }
    return {};
  }

  torch::optim::Optimizer& inner_;
  const LossScaleOptions options_;
  // Read by every replica's scaled_loss() in the next step; written by replica 0 in step(),
  // before the barrier that ends apply_gradients, so the next step sees the new value.
  double scale_;
  int64_t counter_ = 0;
  int64_t skipped_ = 0;
  bool applied_ = true;
};

LossScaleOptimizer::LossScaleOptimizer(std::shared_ptr<MirroredOptimizer> inner,
                                       LossScaleOptions options)
    : inner_(std::move(inner)) {
  DIST_CHECK_ARG(inner_ != nullptr, "LossScaleOptimizer: the inner optimizer is null");
  DIST_CHECK_ARG(is_valid_scale(options.initial_scale),
                 "LossScaleOptimizer: initial_scale must be a power of two of at least 1 (so "
                 "that scaling is exact), got ",
                 options.initial_scale);
  DIST_CHECK_ARG(options.growth_steps >= 1,
                 "LossScaleOptimizer: growth_steps must be at least 1, got ", options.growth_steps);
  step_ = std::make_unique<ScaledStep>(inner_->optimizer(), options);
}

LossScaleOptimizer::~LossScaleOptimizer() = default;

at::Tensor LossScaleOptimizer::scaled_loss(const at::Tensor& loss) const {
  return loss * step_->scale_;
}

void LossScaleOptimizer::apply_gradients() {
  inner_->variables().strategy().apply_gradients(inner_->variables(), *step_);
}

double LossScaleOptimizer::loss_scale() const { return step_->scale_; }
int64_t LossScaleOptimizer::counter() const { return step_->counter_; }
int64_t LossScaleOptimizer::skipped_steps() const { return step_->skipped_; }
bool LossScaleOptimizer::last_step_applied() const { return step_->applied_; }

void LossScaleOptimizer::set_state(double loss_scale, int64_t counter) {
  DIST_CHECK_ARG(is_valid_scale(loss_scale),
                 "LossScaleOptimizer::set_state: loss_scale must be a power of two of at least 1, "
                 "got ",
                 loss_scale);
  DIST_CHECK_ARG(counter >= 0, "LossScaleOptimizer::set_state: counter must be at least 0, got ",
                 counter);
  step_->scale_ = loss_scale;
  step_->counter_ = counter;
}

}  // namespace dist
