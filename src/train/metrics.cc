#include "dist/train/metrics.h"
#include "train/sample_weight.h"

#include <utility>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/train/loss.h"

namespace dist::metrics {
namespace {

// (sum(values * weight), sum(weight)) in double, weight broadcast as the losses do.
std::pair<double, double> weighted_sums(const torch::Tensor& values,
                                        const torch::Tensor& sample_weight) {
  torch::Tensor v = values.detach().to(torch::kDouble);
  torch::Tensor weight = ::dist::detail::broadcast_sample_weight(
      sample_weight.defined() ? sample_weight.detach() : sample_weight, v);
  if (!weight.defined()) return {v.sum().item<double>(), static_cast<double>(v.numel())};
  return {(v * weight).sum().item<double>(), weight.sum().item<double>()};
}

}  // namespace

Mean::Mean(std::string name) : Metric(std::move(name)) {}

void Mean::update_state(const torch::Tensor& values, const torch::Tensor& sample_weight) {
  DIST_CHECK_ARG(values.defined(), name(), ": update_state got an undefined tensor");
  torch::NoGradGuard no_grad;
  auto [total, count] = weighted_sums(values, sample_weight);
  accumulate(total, count);
}

Sum::Sum(std::string name) : Metric(std::move(name)) {}

void Sum::update_state(const torch::Tensor& values, const torch::Tensor& sample_weight) {
  DIST_CHECK_ARG(values.defined(), name(), ": update_state got an undefined tensor");
  torch::NoGradGuard no_grad;
  auto [total, count] = weighted_sums(values, sample_weight);
  accumulate(total, count);
}

SparseCategoricalAccuracy::SparseCategoricalAccuracy(std::string name) : Metric(std::move(name)) {}

void SparseCategoricalAccuracy::update_state(const torch::Tensor& y_true,
                                             const torch::Tensor& y_pred,
                                             const torch::Tensor& sample_weight) {
  DIST_CHECK_ARG(y_true.defined() && y_pred.defined(), name(),
                 ": y_true and y_pred must both be defined tensors");
  torch::NoGradGuard no_grad;
  torch::Tensor labels = y_true.detach();
  if (labels.dim() == y_pred.dim() && y_pred.dim() >= 2 && labels.sizes().back() == 1) {
    labels = labels.squeeze(-1);
  }
  DIST_CHECK_ARG(y_pred.dim() >= 1 && labels.sizes() == y_pred.sizes().slice(0, y_pred.dim() - 1),
                 name(), ": y_true of shape ", y_true.sizes(), " does not match y_pred of shape ",
                 y_pred.sizes(), "; expected one class id per row of y_pred");
  if (labels.numel() == 0) return accumulate(0.0, 0.0);  // an empty replica batch adds nothing
  DIST_CHECK_ARG(y_pred.size(-1) > 0, name(), ": y_pred of shape ", y_pred.sizes(),
                 " has no classes");
  torch::Tensor predicted = y_pred.detach().argmax(-1);
  torch::Tensor matches = predicted.eq(labels.to(predicted.device(), torch::kLong));
  auto [total, count] = weighted_sums(matches, sample_weight);
  accumulate(total, count);
}

MeanAbsoluteError::MeanAbsoluteError(std::string name) : Metric(std::move(name)) {}

void MeanAbsoluteError::update_state(const torch::Tensor& y_true, const torch::Tensor& y_pred,
                                     const torch::Tensor& sample_weight) {
  // The loss with kNone gives the per-example values (and is allowed in any context).
  static const ::dist::MeanAbsoluteError per_example(Reduction::kNone);
  DIST_CHECK_ARG(y_true.defined() && y_pred.defined(), name(),
                 ": y_true and y_pred must both be defined tensors");
  torch::NoGradGuard no_grad;
  auto [total, count] = weighted_sums(per_example(y_true.detach(), y_pred.detach()), sample_weight);
  accumulate(total, count);
}

}  // namespace dist::metrics
