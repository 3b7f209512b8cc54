// Synchronized batch normalization for LibTorch modules (PyTorch's SyncBatchNorm; for Keras
// models: layers::BatchNormalization().synchronized(true)). In training, inside a step of
// several replicas, each channel's mean and variance are those of the global batch, every
// replica's and every worker's examples together, so N replicas normalize as one device does;
// the moving statistics are updated from the global statistics. One all-reduce per call in
// forward and one in backward (ReplicaContext::all_reduce's gradient). A replica with no
// examples takes part. With one replica, or outside a step, it trains with the same arithmetic
// (float64 sums of the statistics) without the all-reduce, so one device and N replicas agree
// to rounding (LibTorch's float32 BatchNorm rounds otherwise: docs/design.md). In eval mode it is
// LibTorch's BatchNorm.
//
// Every replica must run forward and backward through the module in the same order (one
// with an empty slice too): a replica that skips either leaves the others waiting in the
// collective until the strategy's timeout. Under ParameterServerStrategy a step is one
// replica's, so the statistics are that worker's batch (worker-local, with a warning on stderr
// once per process, not refused: the same model runs under every strategy).
//
//   auto model = dist::convert_sync_batchnorm(torch::nn::Sequential(
//       torch::nn::Conv2d(1, 8, 3), torch::nn::BatchNorm2d(8), torch::nn::ReLU()));
//   auto mirrored = strategy.mirror(model);
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

namespace dist {

// Inputs [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W]. Its parameters and buffers have
// BatchNorm's names (weight, bias, running_mean, running_var, num_batches_tracked), so a
// checkpoint of one loads into the other.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(int64_t num_features)
      : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options);

  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  torch::nn::BatchNormOptions options;
  at::Tensor weight, bias;                                    // undefined unless affine
  at::Tensor running_mean, running_var, num_batches_tracked;  // undefined unless tracked
};
TORCH_MODULE(SyncBatchNorm);

// A copy of `model` whose BatchNorm1d/2d/3d children are
// SyncBatchNorm modules with the same options, parameters and statistics (copied, on the same
// device and dtype, trainable as they were); every other child is shared with `model`.
// InvalidArgument naming it for a BatchNorm held inside a child module: that module's forward
// calls its member directly, so no converter can replace it; build it as SyncBatchNorm.
torch::nn::Sequential convert_sync_batchnorm(const torch::nn::Sequential& model);

}  // namespace dist
