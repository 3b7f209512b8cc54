// Learning rates for larger global batches. With N replicas at the same per-replica batch the
// global batch grows N times and each step averages N times as many examples; the rules below
// raise the learning rate to keep training comparable:
//
//   linear:       lr = base_lr * global_batch / base_batch   (Goyal et al., "Accurate, Large
//                 Minibatch SGD"; use with a warmup for large factors)
//   square root:  lr = base_lr * sqrt(global_batch / base_batch)   (often better for Adam)
//
//   double lr = dist::scale_learning_rate_linear(1e-3, 64, 64 * strategy.num_replicas_in_sync());
#pragma once

#include <cmath>
#include <cstdint>

#include "dist/core/error.h"

namespace dist {

namespace detail {
inline double batch_ratio(double base_lr, int64_t base_batch, int64_t global_batch) {
  DIST_CHECK_ARG(std::isfinite(base_lr) && base_lr >= 0,
                 "learning rate scaling: base learning rate must be finite and >= 0, got ",
                 base_lr);
  DIST_CHECK_ARG(base_batch >= 1 && global_batch >= 1,
                 "learning rate scaling: batch sizes must be at least 1, got base ", base_batch,
                 " and global ", global_batch);
  return static_cast<double>(global_batch) / static_cast<double>(base_batch);
}
}  // namespace detail

// base_lr * global_batch / base_batch.
inline double scale_learning_rate_linear(double base_lr, int64_t base_batch, int64_t global_batch) {
  return base_lr * detail::batch_ratio(base_lr, base_batch, global_batch);
}

// base_lr * sqrt(global_batch / base_batch).
inline double scale_learning_rate_sqrt(double base_lr, int64_t base_batch, int64_t global_batch) {
  return base_lr * std::sqrt(detail::batch_ratio(base_lr, base_batch, global_batch));
}

// Linear warmup to target_lr over warmup_epochs (epoch 0 starts at target_lr / warmup_epochs),
// then target_lr: the schedule the linear rule is usually paired with (for
// keras::callbacks::LearningRateScheduler: [=](int e, double) { return warmup_learning_rate(
// e, lr, 5); }).
inline double warmup_learning_rate(int epoch, double target_lr, int warmup_epochs) {
  DIST_CHECK_ARG(warmup_epochs >= 0 && epoch >= 0,
                 "warmup_learning_rate: epoch and warmup_epochs must be >= 0, got ", epoch, " and ",
                 warmup_epochs);
  if (epoch >= warmup_epochs) return target_lr;
  return target_lr * static_cast<double>(epoch + 1) / static_cast<double>(warmup_epochs);
}

}  // namespace dist
