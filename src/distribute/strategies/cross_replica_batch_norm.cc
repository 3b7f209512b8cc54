// Batch normalization over the global batch (distribute/strategies/cross_replica_batch_norm.h).
#include "distribute/strategies/cross_replica_batch_norm.h"

#include <ATen/ATen.h>

#include <iostream>
#include <mutex>
#include <vector>

#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"
#include "dist/distribute/strategy_extended.h"

namespace dist::detail {
namespace {

// Worker-local, not refused: the model is the same under every strategy, and a worker's batch
// is all a step has to normalize over (steps run apart, one worker's each), so it still trains;
// the user learns once that it is not the global batch's statistics.
void warn_once_under_parameter_servers() {
  static std::once_flag warned;
  std::call_once(warned, [] {
    std::cerr << "warning: synchronized batch normalization under ParameterServerStrategy "
                 "normalizes over each worker's own batch: workers step independently, so "
                 "there is no global batch to share statistics over"
              << std::endl;
  });
}

}  // namespace

at::Tensor cross_replica_batch_norm(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& running_mean,
                                    const at::Tensor& running_var, bool training, double momentum,
                                    double eps) {
  ReplicaContext* context = get_replica_context();
  if (training && context != nullptr && context->strategy() != nullptr &&
      context->strategy()->step_schedule().workers_step_apart)
    warn_once_under_parameter_servers();
  if (!training)
    return at::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps,
                          /*cudnn_enabled=*/false);
  // One replica computes as N do (the statistics' sums in float64), only without the
  // all-reduce: one device and N replicas do the same arithmetic, so they agree to rounding.
  // LibTorch's float32 BatchNorm is other arithmetic, and on the tutorial's ResNet over
  // Fashion-MNIST it ended 0.23 from float64 after 3 SGD steps where this ended 3e-6
  // (docs/design.md, SyncBatchNormModuleTest.TheTutorialResnetOnReplicasIsOneDeviceAndFloat64).
  const bool across_replicas = context != nullptr && context->num_replicas_in_sync() > 1;
  DIST_CHECK_ARG(x.dim() >= 2, "synchronized BatchNormalization: input of shape ", x.sizes(),
                 " has no channel axis (it takes [batch, channels, ...])");
  const int64_t channels = x.size(1);
  std::vector<int64_t> over{0};  // every axis but the channels'
  for (int64_t d = 2; d < x.dim(); ++d) over.push_back(d);
  // Normalized in float32 at least (bfloat16 under autocast is widened, as at::batch_norm
  // computes), the statistics summed in float64: nothing of the activation's size in float64.
  const at::Tensor wide = x.scalar_type() == at::kDouble ? x : x.to(at::kFloat);
  const double count_here = static_cast<double>(x.numel() / channels);
  at::Tensor sums = at::cat({at::sum(wide, over, /*keepdim=*/false, at::kDouble),
                             at::sum(wide * wide, over, /*keepdim=*/false, at::kDouble),
                             at::full({1}, count_here, x.options().dtype(at::kDouble))});
  // Differentiable: backward all-reduces the gradients of the sums. Every replica must run
  // this forward and the backward through it (one with no examples too: its output is empty).
  if (across_replicas) sums = context->all_reduce(ReduceOp::kSum, sums);
  const at::Tensor count = sums.narrow(0, 2 * channels, 1);
  const double total = count.item<double>();
  DIST_CHECK_ARG(total > 1, "synchronized BatchNormalization: ", total,
                 " value(s) per channel in the global batch; training needs more than 1 (as "
                 "LibTorch's BatchNorm says for one device)");
  const at::Tensor mean = sums.narrow(0, 0, channels) / count;
  // E[x^2] - E[x]^2 may round below 0 for a constant channel.
  const at::Tensor variance =
      (sums.narrow(0, channels, channels) / count - mean * mean).clamp_min(0);
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = channels;
  at::Tensor y = (wide - mean.to(wide.scalar_type()).view(shape)) *
                 (variance + eps).rsqrt().to(wide.scalar_type()).view(shape);
  if (weight.defined()) y = y * weight.view(shape);
  if (bias.defined()) y = y + bias.view(shape);
  y = y.to(x.scalar_type());  // at::batch_norm's output has the input's dtype
  if (running_mean.defined()) {
    at::NoGradGuard no_grad;
    running_mean.mul_(1 - momentum).add_(mean.detach().to(running_mean.dtype()), momentum);
    // One device's running variance is the unbiased one (n / (n - 1)).
    running_var.mul_(1 - momentum)
        .add_((variance.detach() * (total / (total - 1))).to(running_var.dtype()), momentum);
  }
  return y;
}

}  // namespace dist::detail
