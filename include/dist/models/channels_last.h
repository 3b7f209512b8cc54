// Channels-last (NHWC) activations for convolutional models on CPU.
//
// LibTorch's oneDNN convolutions, pooling and activations run natively on channels-last
// tensors; on NCHW tensors they reorder to and from their own layout at every layer. Feeding
// the first convolution a channels-last input keeps every later activation channels-last (each
// layer's output follows its input's layout), which made the tutorial CNN's training step
// about 1.5x faster on one core (bench/channels_last_probe.py measured 1.45x). Parameters and
// gradients keep their ordinary contiguous layout, so collectives, optimizers and checkpoints see
// nothing new; the values computed are those of the NCHW model up to floating-point summation
// order.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

namespace dist::models {

// `x` [N, C, H, W] as a channels-last tensor (a view when it already is one or C == 1, else a
// copy); tensors of other ranks are returned unchanged.
at::Tensor to_channels_last(const at::Tensor& x);

// A parameterless layer that applies to_channels_last: put it before a model's first
// convolution (torch::nn::Sequential accepts it like any layer).
class ChannelsLastImpl : public torch::nn::Cloneable<ChannelsLastImpl> {
 public:
  void reset() override {}
  at::Tensor forward(const at::Tensor& x) { return to_channels_last(x); }
};
TORCH_MODULE(ChannelsLast);

}  // namespace dist::models
