#include "dist/train/loss.h"
#include "train/sample_weight.h"

#include <utility>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"

namespace dist {
namespace {

// Keras' backend.epsilon(): keeps log() of a probability finite.
constexpr double kEpsilon = 1e-7;

void check_defined(const std::string& loss, const torch::Tensor& y_true,
                   const torch::Tensor& y_pred) {
  DIST_CHECK_ARG(y_true.defined() && y_pred.defined(), loss,
                 ": y_true and y_pred must both be defined tensors");
}

torch::Tensor as_floating(const torch::Tensor& t) {
  return t.is_floating_point() ? t : t.to(torch::kFloat);
}

// y_true in y_pred's dtype and shape. Like Keras, a trailing axis of size 1 on either side is
// tolerated ([N] against [N, 1]), since that is how binary labels and outputs usually come.
torch::Tensor align_targets(const std::string& loss, const torch::Tensor& y_true,
                            const torch::Tensor& y_pred) {
  torch::Tensor t = y_true;
  auto pred = y_pred.sizes();
  if (t.dim() + 1 == y_pred.dim() && pred.back() == 1 && t.sizes() == pred.slice(0, t.dim())) {
    t = t.unsqueeze(-1);
  } else if (t.dim() == y_pred.dim() + 1 && t.sizes().back() == 1 &&
             t.sizes().slice(0, y_pred.dim()) == pred) {
    t = t.squeeze(-1);
  }
  DIST_CHECK_ARG(t.sizes() == pred, loss, ": y_true of shape ", y_true.sizes(),
                 " does not match y_pred of shape ", y_pred.sizes(),
                 "; they must have the same shape (a trailing axis of size 1 may differ)");
  return t.to(y_pred.device(), y_pred.scalar_type());
}

// Keras averages over the last axis: one value per example for [N, D] outputs.
torch::Tensor mean_over_last_axis(const torch::Tensor& t) { return t.dim() >= 2 ? t.mean(-1) : t; }

}  // namespace

std::string to_string(Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone:
      return "NONE";
    case Reduction::kSum:
      return "SUM";
    case Reduction::kSumOverBatchSize:
      return "SUM_OVER_BATCH_SIZE";
    case Reduction::kAuto:
      return "AUTO";
  }
  return "UNKNOWN";
}

Loss::Loss(std::string name, Reduction reduction) : name_(std::move(name)), reduction_(reduction) {}

torch::Tensor Loss::operator()(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                               const torch::Tensor& sample_weight) const {
  bool divides_by_local_batch =
      reduction_ == Reduction::kAuto || reduction_ == Reduction::kSumOverBatchSize;
  if (divides_by_local_batch && in_multi_replica_context()) {
    int replicas = get_replica_context()->num_replicas_in_sync();
    throw InvalidArgument(detail::concat(
        "loss '", name_,
        "' uses Reduction::", reduction_ == Reduction::kAuto ? "kAuto" : "kSumOverBatchSize",
        ", which divides by the local batch size, but it was called inside strategy.run() with ",
        replicas,
        " replicas in sync. The replicas' gradients are summed by the all-reduce, so dividing "
        "by the local batch size gives the wrong gradient (about ",
        replicas,
        " times too large, and skewed when the replicas' batches are uneven). In a "
        "multi-replica custom training loop, construct the loss with dist::Reduction::kNone (or "
        "kSum) and scale it with dist::compute_average_loss(per_example_loss, "
        "global_batch_size), which divides by the global batch size (by default the one of the "
        "distributed dataset's current batch)."));
  }
  torch::Tensor losses = unreduced(y_true, y_pred, sample_weight);
  if (reduction_ == Reduction::kNone) return losses;
  if (reduction_ == Reduction::kSum || losses.numel() == 0) {
    return losses.sum();  // an empty batch averages to 0, not 0/0 (Keras' divide_no_nan)
  }
  return losses.sum() / static_cast<double>(losses.numel());
}

torch::Tensor Loss::unreduced(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                              const torch::Tensor& sample_weight) const {
  check_defined(name_, y_true, y_pred);
  // A model under a mixed precision policy returns bfloat16 or float16 outputs; the loss (a
  // log of a softmax, a mean of squares) is computed in float32, as Keras' guide advises.
  const bool reduced =
      y_pred.scalar_type() == torch::kBFloat16 || y_pred.scalar_type() == torch::kHalf;
  torch::Tensor losses = per_example(y_true, reduced ? y_pred.to(torch::kFloat) : y_pred);
  torch::Tensor weight = detail::broadcast_sample_weight(sample_weight, losses);
  return weight.defined() ? losses * weight : losses;
}

SparseCategoricalCrossentropy::SparseCategoricalCrossentropy(bool from_logits, Reduction reduction)
    : Loss("sparse_categorical_crossentropy", reduction), from_logits_(from_logits) {}

torch::Tensor SparseCategoricalCrossentropy::per_example(const torch::Tensor& y_true,
                                                         const torch::Tensor& y_pred) const {
  DIST_CHECK_ARG(y_pred.dim() >= 1 && y_pred.is_floating_point(), name(),
                 ": y_pred must be floating point of shape [N, num_classes], got ",
                 y_pred.scalar_type(), " of shape ", y_pred.sizes());
  torch::Tensor labels = y_true;
  if (labels.dim() == y_pred.dim() && y_pred.dim() >= 2 && labels.sizes().back() == 1) {
    labels = labels.squeeze(-1);
  }
  auto expected = y_pred.sizes().slice(0, y_pred.dim() - 1);
  DIST_CHECK_ARG(labels.sizes() == expected, name(), ": y_true of shape ", y_true.sizes(),
                 " does not match y_pred of shape ", y_pred.sizes(),
                 "; expected class ids of shape ", expected,
                 " (y_pred's shape without its "
                 "last, class axis)");
  DIST_CHECK_ARG(!labels.is_complex() && labels.scalar_type() != torch::kBool, name(),
                 ": y_true must hold integer class ids, got ", labels.scalar_type());
  labels = labels.to(y_pred.device(), torch::kLong);
  int64_t classes = y_pred.size(-1);
  if (labels.numel() > 0) {
    int64_t low = labels.min().item<int64_t>();
    int64_t high = labels.max().item<int64_t>();
    DIST_CHECK_ARG(low >= 0 && high < classes, name(), ": class id ", low < 0 ? low : high,
                   " is out of range for y_pred with ", classes, " classes [0, ", classes, ")");
  }
  torch::Tensor log_probs;
  if (from_logits_) {
    log_probs = torch::log_softmax(y_pred, -1);
  } else {
    // As tf.keras: clip, take the log, and treat it as logits, which also renormalizes
    // probabilities that do not sum to exactly 1.
    log_probs = torch::log_softmax(torch::log(y_pred.clamp(kEpsilon, 1.0 - kEpsilon)), -1);
  }
  return -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1);
}

BinaryCrossentropy::BinaryCrossentropy(bool from_logits, Reduction reduction)
    : Loss("binary_crossentropy", reduction), from_logits_(from_logits) {}

torch::Tensor BinaryCrossentropy::per_example(const torch::Tensor& y_true,
                                              const torch::Tensor& y_pred) const {
  torch::Tensor pred = as_floating(y_pred);
  torch::Tensor z = align_targets(name(), y_true, pred);
  torch::Tensor bce;
  if (from_logits_) {
    // max(x, 0) - x z + log(1 + exp(-|x|)): never overflows (tf.nn.sigmoid_cross_entropy...).
    bce = pred.clamp_min(0) - pred * z + torch::log1p(torch::exp(-pred.abs()));
  } else {
    torch::Tensor p = pred.clamp(kEpsilon, 1.0 - kEpsilon);
    bce = -(z * torch::log(p + kEpsilon) + (1 - z) * torch::log(1 - p + kEpsilon));
  }
  return mean_over_last_axis(bce);
}

MeanAbsoluteError::MeanAbsoluteError(Reduction reduction)
    : Loss("mean_absolute_error", reduction) {}

torch::Tensor MeanAbsoluteError::per_example(const torch::Tensor& y_true,
                                             const torch::Tensor& y_pred) const {
  torch::Tensor pred = as_floating(y_pred);
  return mean_over_last_axis((align_targets(name(), y_true, pred) - pred).abs());
}

MeanSquaredError::MeanSquaredError(Reduction reduction) : Loss("mean_squared_error", reduction) {}

torch::Tensor MeanSquaredError::per_example(const torch::Tensor& y_true,
                                            const torch::Tensor& y_pred) const {
  torch::Tensor pred = as_floating(y_pred);
  return mean_over_last_axis((align_targets(name(), y_true, pred) - pred).square());
}

torch::Tensor compute_average_loss(const torch::Tensor& per_example_loss, int64_t global_batch_size,
                                   const torch::Tensor& sample_weight) {
  DIST_CHECK_ARG(per_example_loss.defined(),
                 "compute_average_loss: per_example_loss is an undefined tensor");
  DIST_CHECK_ARG(global_batch_size >= -1, "compute_average_loss: global_batch_size must be >= 0 ",
                 "(or -1 to take it from the replica context), got ", global_batch_size);
  int64_t batch = global_batch_size;
  if (batch == -1) {
    ReplicaContext* context = get_replica_context();
    if (context != nullptr && context->global_batch_size() >= 0) {
      batch = context->global_batch_size();
    } else {
      // Each replica only sees its local batch; guessing R * local size is wrong for uneven
      // batches, so insist on the true size.
      DIST_CHECK_ARG(!in_multi_replica_context(),
                     "compute_average_loss: the global batch size is unknown inside this "
                     "multi-replica strategy.run() (replica ",
                     context->replica_id_in_sync_group(), " of ", context->num_replicas_in_sync(),
                     "). Pass global_batch_size explicitly, or iterate a distributed dataset "
                     "(strategy.distribute(...)) so that run() knows each step's global batch "
                     "size.");
      batch = per_example_loss.dim() == 0 ? 1 : per_example_loss.size(0);
    }
  }
  torch::Tensor losses = as_floating(per_example_loss);
  torch::Tensor weight = detail::broadcast_sample_weight(sample_weight, losses);
  if (weight.defined()) losses = losses * weight;
  torch::Tensor total = losses.sum();  // 0 for an empty replica batch, still in the graph
  if (batch == 0) {
    DIST_CHECK_ARG(per_example_loss.numel() == 0,
                   "compute_average_loss: global_batch_size is 0 (an empty global batch) but "
                   "per_example_loss has shape ",
                   per_example_loss.sizes());
    return total;
  }
  return total / static_cast<double>(batch);
}

torch::Tensor scale_regularization_loss(const torch::Tensor& regularization_loss) {
  DIST_CHECK_ARG(regularization_loss.defined(),
                 "scale_regularization_loss: regularization_loss is an undefined tensor");
  ReplicaContext* context = get_replica_context();
  if (context == nullptr) return regularization_loss;
  return regularization_loss / static_cast<double>(context->num_replicas_in_sync());
}

namespace detail {

torch::Tensor broadcast_sample_weight(const torch::Tensor& sample_weight,
                                      const torch::Tensor& values) {
  if (!sample_weight.defined()) return sample_weight;
  torch::Tensor weight = sample_weight.to(values.device(), values.scalar_type());
  if (weight.dim() == values.dim() + 1 && weight.sizes().back() == 1) weight = weight.squeeze(-1);
  DIST_CHECK_ARG(
      weight.dim() <= values.dim() && weight.sizes() == values.sizes().slice(0, weight.dim()),
      "sample_weight of shape ", sample_weight.sizes(),
      " does not match per-example values of shape ", values.sizes(),
      "; pass a scalar or one weight per example (shape [N] or [N, 1])");
  std::vector<int64_t> shape(weight.sizes().begin(), weight.sizes().end());
  shape.resize(values.dim(), 1);
  return weight.reshape(shape).expand(values.sizes());
}

}  // namespace detail
}  // namespace dist
