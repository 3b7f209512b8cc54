// Losses with Keras semantics, and the helpers that scale a loss correctly across replicas.
//
// Why the reduction matters under a strategy. Each replica computes a loss on its share of the
// global batch, calls backward(), and the replicas' gradients are SUMMED by the all-reduce.
// For the summed gradient to equal the one-device gradient of mean(loss over the global
// batch), each replica must divide its summed per-example loss by the GLOBAL batch size:
//
//   replica 0: examples {2, 3} -> (2 + 3) / 4 = 1.25
//   replica 1: examples {4, 5} -> (4 + 5) / 4 = 2.25      sum 3.5 = mean{2, 3, 4, 5}
//
// Dividing by the local batch size instead (Reduction::kAuto, kSumOverBatchSize) would give
// 2.5 + 4.5 = 7, i.e. R times too large, and wrong again when the replicas' batches are uneven.
// So inside a multi-replica strategy.run() those two reductions are rejected; use kNone and
// compute_average_loss (or kSum divided by the global batch size), as in tf.distribute.
//
// Thread safety: Loss objects are immutable and may be shared by replica threads.
#pragma once

#include <cstdint>
#include <string>

#include <torch/types.h>

namespace dist {

// How a Loss reduces its per-example values (tf.keras.losses.Reduction).
enum class Reduction {
  kNone,              // the per-example losses, unreduced
  kSum,               // sum of the weighted per-example losses
  kSumOverBatchSize,  // that sum divided by the number of per-example losses (0 when empty)
  kAuto,              // kSumOverBatchSize, as in Keras
};

// "NONE", "SUM", "SUM_OVER_BATCH_SIZE", "AUTO".
std::string to_string(Reduction reduction);

class Loss {
 public:
  virtual ~Loss() = default;

  // Per-example losses, multiplied by sample_weight (a scalar, or one weight per example:
  // shape [N] or [N, 1] for N examples; an undefined tensor means weight 1), then reduced.
  // Throws InvalidArgument on mismatched shapes, and for kAuto / kSumOverBatchSize inside a
  // multi-replica strategy.run() (see the top of this file).
  torch::Tensor operator()(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                           const torch::Tensor& sample_weight = {}) const;

  // The weighted per-example losses whatever this loss's reduction (what Keras' compile uses:
  // fit applies the reduction itself, scaled by the global batch). Allowed in any context.
  torch::Tensor unreduced(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                          const torch::Tensor& sample_weight = {}) const;
  Reduction reduction() const { return reduction_; }
  // Keras' snake_case name, e.g. "sparse_categorical_crossentropy".
  const std::string& name() const { return name_; }

 protected:
  Loss(std::string name, Reduction reduction);

  // The unweighted loss of each example. Shapes are validated here.
  virtual torch::Tensor per_example(const torch::Tensor& y_true,
                                    const torch::Tensor& y_pred) const = 0;

 private:
  std::string name_;
  Reduction reduction_;
};

// y_true: integer class ids of shape [N] (or [N, 1]); y_pred: [N, C] logits or probabilities.
// More leading axes are allowed: y_true [N, T] with y_pred [N, T, C] gives per-example [N, T].
// Probabilities are clipped to [1e-7, 1 - 1e-7] and renormalized, as tf.keras does.
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false,
                                         Reduction reduction = Reduction::kAuto);

 protected:
  torch::Tensor per_example(const torch::Tensor& y_true,
                            const torch::Tensor& y_pred) const override;

 private:
  bool from_logits_;
};

// y_true in [0, 1] and y_pred (probabilities, or logits with from_logits) of the same shape;
// per-example value is the mean over the last axis when rank >= 2, element-wise for rank 1.
// Probabilities are clipped to [1e-7, 1 - 1e-7]; logits use the overflow-free formula.
class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(bool from_logits = false, Reduction reduction = Reduction::kAuto);

 protected:
  torch::Tensor per_example(const torch::Tensor& y_true,
                            const torch::Tensor& y_pred) const override;

 private:
  bool from_logits_;
};

// mean(|y_true - y_pred|) over the last axis when rank >= 2, element-wise for rank 1.
class MeanAbsoluteError : public Loss {
 public:
  explicit MeanAbsoluteError(Reduction reduction = Reduction::kAuto);

 protected:
  torch::Tensor per_example(const torch::Tensor& y_true,
                            const torch::Tensor& y_pred) const override;
};

// mean((y_true - y_pred)^2) over the last axis when rank >= 2, element-wise for rank 1.
class MeanSquaredError : public Loss {
 public:
  explicit MeanSquaredError(Reduction reduction = Reduction::kAuto);

 protected:
  torch::Tensor per_example(const torch::Tensor& y_true,
                            const torch::Tensor& y_pred) const override;
};

// sum(per_example_loss * sample_weight) / global_batch_size: the per-replica loss whose
// gradients, summed over replicas, equal the gradient of the mean over the global batch
// (tf.nn.compute_average_loss).
//
// global_batch_size = -1 (the default) means: the current step's global batch size from the
// replica context when it is known (the step's input came from a distributed dataset);
// otherwise, outside a multi-replica run, the local batch size per_example_loss.size(0) (1 for
// a scalar); inside a multi-replica run without a known size, InvalidArgument.
// global_batch_size = 0 (an empty global batch) requires an empty per_example_loss and gives 0.
// The result is a scalar that keeps the autograd graph, even for an empty replica batch.
torch::Tensor compute_average_loss(const torch::Tensor& per_example_loss,
                                   int64_t global_batch_size = -1,
                                   const torch::Tensor& sample_weight = {});

// regularization_loss / num_replicas_in_sync (1 outside strategy.run()), so that summing the
// replicas' gradients counts the regularization term once (tf.nn.scale_regularization_loss).
torch::Tensor scale_regularization_loss(const torch::Tensor& regularization_loss);

}  // namespace dist
