// The Mirrored Strategy tutorial's ResNet as a torch::nn::Sequential (reference_models.h),
// computing as its Keras twin (keras_models.h) does: TensorFlow's "same" padding (the extra
// row at the end), Keras' batch normalization defaults.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/padding.h>

#include <cmath>
#include <string>

#include "dist/distribute/sync_batch_norm.h"
#include "dist/models/channels_last.h"
#include "dist/models/reference_models.h"
#include "keras/window_arithmetic.h"

namespace dist::models {
namespace {

using namespace torch::nn;      // NOLINT: layer names read better unqualified here
using keras::detail::pad_same;  // TensorFlow's "same" padding, as the Keras layers pad

// Keras' BatchNormalization defaults (momentum 0.99 is LibTorch's 0.01, epsilon 1e-3).
AnyModule batch_norm(int64_t channels, bool synchronized) {
  const auto options = BatchNormOptions(channels).momentum(0.01).eps(1e-3);
  if (synchronized) return AnyModule(SyncBatchNorm(options));
  return AnyModule(BatchNorm2d(options));
}

// Conv2D with "same" padding, TensorFlow's way, and a bias. At stride 1 an odd kernel pads
// (kernel - 1) / 2 on every side: the convolution's own padding, no padded copy of the input.
Conv2d same_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  auto options = Conv2dOptions(in, out, kernel).stride(stride);
  if (stride == 1 && kernel % 2 == 1) options.padding(kernel / 2);
  return Conv2d(options);
}
at::Tensor conv_same(Conv2d& conv, const at::Tensor& x) {
  const int64_t kernel = conv->options.kernel_size()->at(0);
  const int64_t stride = conv->options.stride()->at(0);
  if (stride == 1 && kernel % 2 == 1) return conv->forward(x);
  return conv->forward(pad_same(x, kernel, stride, 0.0));
}

// The tutorial's resnet_block: conv 3x3, BN, ReLU, conv 3x3, BN, plus the shortcut (a 1x1
// convolution and BN when it projects), ReLU.
class ResidualBlockImpl : public Cloneable<ResidualBlockImpl> {
 public:
  ResidualBlockImpl(int64_t in, int64_t filters, int64_t strides, bool projection,
                    bool synchronized)
      : in_(in),
        filters_(filters),
        strides_(strides),
        projection_(projection),
        synchronized_(synchronized) {
    reset();
  }

  void reset() override {
    if (projection_) {
      shortcut_conv_ = register_module("shortcut_conv",
                                       Conv2d(Conv2dOptions(in_, filters_, 1).stride(strides_)));
      shortcut_bn_ = batch_norm(filters_, synchronized_);
      register_module("shortcut_bn", shortcut_bn_.ptr());
    }
    conv1_ = register_module("conv1", same_conv(in_, filters_, 3, strides_));
    bn1_ = batch_norm(filters_, synchronized_);
    register_module("bn1", bn1_.ptr());
    conv2_ = register_module("conv2", same_conv(filters_, filters_, 3, 1));
    bn2_ = batch_norm(filters_, synchronized_);
    register_module("bn2", bn2_.ptr());
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor shortcut = x;
    if (projection_) shortcut = shortcut_bn_.forward<at::Tensor>(shortcut_conv_->forward(x));
    at::Tensor y = torch::relu(bn1_.forward<at::Tensor>(conv_same(conv1_, x)));
    y = bn2_.forward<at::Tensor>(conv_same(conv2_, y));
    return torch::relu(y + shortcut);
  }

 private:
  int64_t in_, filters_, strides_;
  bool projection_, synchronized_;
  Conv2d conv1_{nullptr}, conv2_{nullptr}, shortcut_conv_{nullptr};
  AnyModule bn1_, bn2_, shortcut_bn_;
};
TORCH_MODULE(ResidualBlock);

// Conv2D 7x7/2 (conv1), BN (bn1), ReLU, MaxPooling2D 3/2, each with "same" padding.
class StemImpl : public Cloneable<StemImpl> {
 public:
  StemImpl(int64_t channels, bool synchronized) : channels_(channels), synchronized_(synchronized) {
    reset();
  }

  void reset() override {
    conv1_ = register_module("conv1", same_conv(channels_, kResnetFilters[0], 7, 2));
    bn1_ = batch_norm(kResnetFilters[0], synchronized_);
    register_module("bn1", bn1_.ptr());
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = torch::relu(bn1_.forward<at::Tensor>(conv_same(conv1_, x)));
    return torch::max_pool2d(pad_same(y, 3, 2, -INFINITY), 3, 2);
  }

 private:
  int64_t channels_;
  bool synchronized_;
  Conv2d conv1_{nullptr};
  AnyModule bn1_;
};
TORCH_MODULE(Stem);

}  // namespace

Sequential make_tutorial_resnet(bool synchronized_batch_norm, const ImageModelInput& input) {
  check_image_model_input(input, "resnet");
  const bool sync = synchronized_batch_norm;
  Sequential resnet;
  resnet->push_back("pad", ZeroPad2d(ZeroPad2dOptions(2)));  // 28x28 to 32x32
  resnet->push_back("channels_last", ChannelsLast());        // 1.5x faster (channels_last.h)
  resnet->push_back("stem", Stem(input.channels, sync));
  int64_t in = kResnetFilters[0];
  for (size_t stage = 0; stage < 3; ++stage) {
    const int64_t filters = kResnetFilters[stage];
    resnet->push_back("block" + std::to_string(2 * stage + 1),
                      ResidualBlock(in, filters, stage == 0 ? 1 : 2, true, sync));
    resnet->push_back("block" + std::to_string(2 * stage + 2),
                      ResidualBlock(filters, filters, 1, false, sync));
    in = filters;
  }
  resnet->push_back("pool", Functional([](const at::Tensor& x) { return x.mean({2, 3}); }));
  resnet->push_back("dense", Linear(in, input.classes));
  return resnet;
}

}  // namespace dist::models
