// The concrete metrics, with tf.keras.metrics semantics (see dist/train/metric.h for how the
// per-replica state is kept and combined).
//
// They live in dist::metrics, as in tf.keras.metrics, because some share their name with a
// loss in dist (dist::MeanAbsoluteError is the loss, dist::metrics::MeanAbsoluteError the
// metric).
//
// sample_weight, everywhere: an undefined tensor (weight 1), a scalar, or one weight per
// example (shape [N] or [N, 1]); otherwise InvalidArgument naming both shapes. Inputs may
// require grad: metrics never record into the autograd graph.
#pragma once

#include <string>

#include <torch/types.h>

#include "dist/train/metric.h"

namespace dist::metrics {

// Weighted mean of all values seen: sum(values * weight) / sum(weight).
// Without weights each element counts once.
class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean");
  void update_state(const torch::Tensor& values, const torch::Tensor& sample_weight = {});
};

// Weighted sum of all values seen: sum(values * weight).
class Sum : public Metric {
 public:
  explicit Sum(std::string name = "sum");
  void update_state(const torch::Tensor& values, const torch::Tensor& sample_weight = {});

 protected:
  double finalize(double total, double count) const override { return total; }
};

// Fraction of examples whose argmax over y_pred's last axis equals the integer label.
// y_true: [N] (or [N, 1]); y_pred: [N, C] scores, logits or probabilities.
class SparseCategoricalAccuracy : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy");
  void update_state(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                    const torch::Tensor& sample_weight = {});
};

// Mean over examples of the per-example mean absolute error, as the loss computes it
// (averaged over the last axis for rank >= 2, element-wise for rank 1).
class MeanAbsoluteError : public Metric {
 public:
  explicit MeanAbsoluteError(std::string name = "mean_absolute_error");
  void update_state(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                    const torch::Tensor& sample_weight = {});
};

}  // namespace dist::metrics
