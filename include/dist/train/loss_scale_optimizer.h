// LossScaleOptimizer: dynamic loss scaling for float16 training, with Keras' semantics
// (tf.keras.mixed_precision.LossScaleOptimizer, dynamic=True).
//
// float16 gradients underflow to zero below about 6e-8. Multiplying the loss by a large scale
// before backward() lifts them into range; apply_gradients() divides them back before the
// optimizer sees them. When the scale is too large a gradient overflows to inf; that step is
// skipped and the scale halved. After `growth_steps` finite steps in a row it doubles.
//
//   auto optimizer = std::make_shared<dist::LossScaleOptimizer>(
//       strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3)));
//   strategy.run([&](const dist::data::Element& b) {
//     auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
//     optimizer->scaled_loss(loss).backward();
//     optimizer->apply_gradients();  // all-reduce, unscale, check, step or skip, rescale
//     return loss.detach();
//   }, batch);
//
// The finiteness check runs on the all-reduced gradients, which every replica and worker holds
// identically, so all of them skip or step together and their scales never diverge. The scales
// are powers of two, so scaling and unscaling are exact: in float32 a step with loss scaling is
// bit-identical to one without (unless a gradient is subnormal).
//
// On CPU this build has no float16 compute (mixed_precision.h); bfloat16 needs no loss scaling.
// The scale is not part of dist::Checkpoint yet: read loss_scale() / counter() and restore them
// with set_state() to resume exactly.
#pragma once

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "dist/distribute/mirrored_optimizer.h"

namespace dist {

struct LossScaleOptions {
  double initial_scale = 32768.0;  // 2^15, Keras' default
  int64_t growth_steps = 2000;     // finite steps in a row before the scale doubles
  bool dynamic = true;             // false: the scale stays initial_scale and every step applies
};

class LossScaleOptimizer {
 public:
  explicit LossScaleOptimizer(std::shared_ptr<MirroredOptimizer> inner,
                              LossScaleOptions options = {});
  ~LossScaleOptimizer();

  // loss * loss_scale(): call backward() on this instead of the loss.
  at::Tensor scaled_loss(const at::Tensor& loss) const;

  // All-reduces the gradients (a collective: call it from every replica, as
  // MirroredOptimizer::apply_gradients), divides them by the scale, and takes the inner
  // optimizer's step if every gradient is finite; otherwise skips it. Then updates the scale.
  void apply_gradients();

  double loss_scale() const;
  // Finite steps since the scale last changed (Keras' dynamic_counter).
  int64_t counter() const;
  // Steps skipped for a non-finite gradient since construction.
  int64_t skipped_steps() const;
  // Whether the last apply_gradients() took its step.
  bool last_step_applied() const;
  // Restores a saved scale and counter (e.g. after resuming from a checkpoint).
  void set_state(double loss_scale, int64_t counter);

  MirroredOptimizer& inner_optimizer() { return *inner_; }

 private:
  class ScaledStep;
  std::shared_ptr<MirroredOptimizer> inner_;
  std::unique_ptr<ScaledStep> step_;
};

}  // namespace dist
