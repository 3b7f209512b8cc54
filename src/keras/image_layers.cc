// The layers image-to-image models (pix2pix's U-Net generator, PatchGAN discriminator) add to
// the others: Conv2DTranspose, LeakyReLU, InstanceNormalization, Concatenate, Activation and
// ZeroPadding2D.
#include "keras/layer_checks.h"

#include <cmath>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/conv.h>

#include "dist/core/error.h"

namespace dist::keras {
namespace detail {
namespace {

// How TensorFlow places a transposed convolution's output, in LibTorch's terms.
//
// TensorFlow's conv2d_transpose is the gradient of a convolution whose input has the output's
// size: input i, tap t lands on output i * strides + t - before, where `before` is the forward
// convolution's padding before the data. For "same" that padding totals
// max(kernel - strides, 0) (the forward convolution maps in * strides to in), the smaller half
// before. LibTorch's ConvTranspose2d computes the full (in - 1) * strides + kernel outputs, cuts
// `padding` from both ends and adds `output_padding` at the end. So padding = before, and
// output_padding makes up the rest of the size; when the forward padding is odd (kernel -
// strides odd) the end needs one more cut than the start, which LibTorch cannot express: that
// row and column are cut after the convolution instead.
struct TransposeGeometry {
  int64_t padding = 0;
  int64_t output_padding = 0;
  bool cut_last = false;  // drop the last row and column
};

TransposeGeometry transpose_geometry(int64_t kernel, int64_t strides, const std::string& padding) {
  TransposeGeometry g;
  // "valid" pads nothing; Keras' size in * strides + max(kernel - strides, 0) then needs
  // strides - kernel extra rows when the kernel is smaller than the stride.
  if (padding == "same") g.padding = std::max<int64_t>(kernel - strides, 0) / 2;
  const int64_t extra =
      padding == "same" ? strides - kernel + 2 * g.padding : std::max<int64_t>(strides - kernel, 0);
  DIST_INTERNAL_ASSERT(extra >= -1 && extra < strides, "transposed convolution geometry");
  g.output_padding = std::max<int64_t>(extra, 0);
  g.cut_last = extra < 0;
  return g;
}

class Conv2DTransposeSpec : public LayerSpec {
 public:
  Conv2DTransposeSpec(int64_t filters, int64_t kernel)
      : LayerSpec("Conv2DTranspose"), filters(filters), kernel(kernel) {
    DIST_CHECK_ARG(filters >= 1 && kernel >= 1,
                   "Conv2DTranspose needs filters >= 1 and kernel_size >= 1, got ", filters,
                   " and ", kernel);
  }
  std::string default_name() const override { return "conv2d_transpose"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    return {filters, output_size(in[0][1]), output_size(in[0][2])};
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    const TransposeGeometry g = transpose_geometry(kernel, strides, padding);
    return std::make_shared<torch::nn::ConvTranspose2dImpl>(
        torch::nn::ConvTranspose2dOptions(in[0][0], filters, kernel)
            .stride(strides)
            .padding(g.padding)
            .output_padding(g.output_padding)
            .bias(use_bias));
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor y = dynamic_cast<torch::nn::ConvTranspose2dImpl*>(m)->forward(x[0]);
    if (transpose_geometry(kernel, strides, padding).cut_last)
      y = y.slice(2, 0, output_size(x[0].size(2))).slice(3, 0, output_size(x[0].size(3)));
    return activate(y, activation, 1);
  }

  int64_t output_size(int64_t in) const {
    if (padding == "same") return in * strides;
    return in * strides + std::max<int64_t>(kernel - strides, 0);
  }

  int64_t filters, kernel, strides = 1;
  std::string padding = "valid", activation;
  bool use_bias = true;
};

class LeakyReLUSpec : public LayerSpec {
 public:
  explicit LeakyReLUSpec(double alpha) : LayerSpec("LeakyReLU"), alpha(alpha) {
    DIST_CHECK_ARG(std::isfinite(alpha) && alpha >= 0,
                   "LeakyReLU alpha (the slope below zero) must be finite and at least 0, got ",
                   alpha);
  }
  std::string default_name() const override { return "leaky_re_lu"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    return in[0];
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return at::leaky_relu(x[0], alpha);
  }

  double alpha;
};

// gamma and beta of InstanceNormalization, per channel.
class InstanceNormImpl : public torch::nn::Cloneable<InstanceNormImpl> {
 public:
  InstanceNormImpl(int64_t channels, bool center, bool scale)
      : channels_(channels), center_(center), scale_(scale) {
    reset();
  }
  void reset() override {
    if (scale_) gamma = register_parameter("gamma", at::ones({channels_}));
    if (center_) beta = register_parameter("beta", at::zeros({channels_}));
  }
  at::Tensor gamma, beta;  // undefined when not learned

 private:
  int64_t channels_;
  bool center_, scale_;
};

class InstanceNormalizationSpec : public LayerSpec {
 public:
  InstanceNormalizationSpec() : LayerSpec("InstanceNormalization") {}
  std::string default_name() const override { return "instance_normalization"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    DIST_CHECK_ARG(in[0].size() >= 2, describe(kind(), n),
                   " normalizes each channel over the spatial axes, so it needs examples of "
                   "shape (channels, height, width) or at least (channels, length), got ",
                   shape_to_string(in[0]));
    return in[0];
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    if (!center && !scale) return nullptr;
    return std::make_shared<InstanceNormImpl>(in[0][0], center, scale);
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    auto* affine = dynamic_cast<InstanceNormImpl*>(m);
    at::Tensor gamma = affine != nullptr ? affine->gamma : at::Tensor();
    at::Tensor beta = affine != nullptr ? affine->beta : at::Tensor();
    // LibTorch's instance norm with input statistics only: the biased variance per example and
    // channel, as tf.nn.moments gives it.
    return at::instance_norm(x[0], gamma, beta, /*running_mean=*/{}, /*running_var=*/{},
                             /*use_input_stats=*/true, /*momentum=*/0.0, epsilon,
                             /*cudnn_enabled=*/false);
  }

  double epsilon = 1e-3;
  bool center = true, scale = true;
};

class ConcatenateSpec : public LayerSpec {
 public:
  explicit ConcatenateSpec(int64_t axis) : LayerSpec("Concatenate"), axis(axis) {}
  std::string default_name() const override { return "concatenate"; }
  int arity() const override { return 0; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    const std::string layer = describe(kind(), n);
    DIST_CHECK_ARG(in.size() >= 2, layer, " needs two or more inputs, got ", in.size());
    const int64_t a = example_axis(static_cast<int64_t>(in[0].size()), layer);
    Shape out = in[0];
    for (size_t i = 1; i < in.size(); ++i) {
      bool fits = in[i].size() == in[0].size();
      for (size_t d = 0; fits && d < in[0].size(); ++d)
        fits = static_cast<int64_t>(d) == a || in[i][d] == in[0][d];
      DIST_CHECK_ARG(fits, layer, " joins along axis ", axis,
                     " (of the example shape, without the batch axis), so its inputs must agree "
                     "on every other axis, got ",
                     shape_to_string(in[0]), " and ", shape_to_string(in[i]));
      out[static_cast<size_t>(a)] += in[i][static_cast<size_t>(a)];
    }
    return out;
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return at::cat(x, example_axis(x[0].dim() - 1, kind()) + 1);
  }

  // `axis` as an index into an example shape of `rank` axes.
  int64_t example_axis(int64_t rank, const std::string& layer) const {
    const int64_t a = axis < 0 ? axis + rank : axis;
    DIST_CHECK_ARG(a >= 0 && a < rank, layer, ": axis ", axis, " is outside examples of ", rank,
                   " axes; axes count over the example shape without the batch axis (0 is "
                   "channels)");
    return a;
  }

  int64_t axis;
};

class ActivationSpec : public LayerSpec {
 public:
  explicit ActivationSpec(std::string activation)
      : LayerSpec("Activation"), activation(std::move(activation)) {
    const std::string& a = this->activation;
    DIST_CHECK_ARG(a == "tanh" || a == "sigmoid" || a == "relu" || a == "softmax" || a == "linear",
                   "Activation: unknown activation '", a,
                   "'; use tanh, sigmoid, relu, softmax or linear");
  }
  std::string default_name() const override { return "activation"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    return in[0];
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    // Softmax over channels for images (channels first), else over the last axis.
    return activate(x[0], activation, x[0].dim() == 4 ? 1 : -1);
  }

  std::string activation;
};

class ZeroPadding2DSpec : public LayerSpec {
 public:
  ZeroPadding2DSpec(int64_t top, int64_t bottom, int64_t left, int64_t right)
      : LayerSpec("ZeroPadding2D"), top(top), bottom(bottom), left(left), right(right) {
    DIST_CHECK_ARG(top >= 0 && bottom >= 0 && left >= 0 && right >= 0,
                   "ZeroPadding2D padding must be at least 0 on every side, got ((", top, ", ",
                   bottom, "), (", left, ", ", right, "))");
  }
  std::string default_name() const override { return "zero_padding2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    return {in[0][0], in[0][1] + top + bottom, in[0][2] + left + right};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return at::constant_pad_nd(x[0], {left, right, top, bottom}, 0);
  }

  int64_t top, bottom, left, right;
};

}  // namespace
}  // namespace detail

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

Conv2DTranspose::Conv2DTranspose(int64_t filters, int64_t kernel_size)
    : Layer(std::make_shared<Conv2DTransposeSpec>(filters, kernel_size)) {}
Conv2DTranspose& Conv2DTranspose::strides(int64_t strides) {
  DIST_CHECK_ARG(strides >= 1, "Conv2DTranspose strides must be at least 1, got ", strides);
  options_of<Conv2DTransposeSpec>().strides = strides;
  return *this;
}
Conv2DTranspose& Conv2DTranspose::padding(const std::string& padding) {
  check_padding(padding);
  options_of<Conv2DTransposeSpec>().padding = padding;
  return *this;
}
Conv2DTranspose& Conv2DTranspose::activation(const std::string& activation) {
  check_activation(activation);
  options_of<Conv2DTransposeSpec>().activation = activation;
  return *this;
}
Conv2DTranspose& Conv2DTranspose::use_bias(bool use_bias) {
  options_of<Conv2DTransposeSpec>().use_bias = use_bias;
  return *this;
}

LeakyReLU::LeakyReLU(double alpha) : Layer(std::make_shared<LeakyReLUSpec>(alpha)) {}

InstanceNormalization::InstanceNormalization()
    : Layer(std::make_shared<InstanceNormalizationSpec>()) {}
InstanceNormalization& InstanceNormalization::epsilon(double epsilon) {
  DIST_CHECK_ARG(epsilon > 0, "InstanceNormalization epsilon must be positive, got ", epsilon);
  options_of<InstanceNormalizationSpec>().epsilon = epsilon;
  return *this;
}
InstanceNormalization& InstanceNormalization::center(bool center) {
  options_of<InstanceNormalizationSpec>().center = center;
  return *this;
}
InstanceNormalization& InstanceNormalization::scale(bool scale) {
  options_of<InstanceNormalizationSpec>().scale = scale;
  return *this;
}

Concatenate::Concatenate(int64_t axis) : Layer(std::make_shared<ConcatenateSpec>(axis)) {}

Activation::Activation(const std::string& activation)
    : Layer(std::make_shared<ActivationSpec>(activation)) {}

ZeroPadding2D::ZeroPadding2D(int64_t padding)
    : Layer(std::make_shared<ZeroPadding2DSpec>(padding, padding, padding, padding)) {}
ZeroPadding2D::ZeroPadding2D(
    const std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>& padding)
    : Layer(std::make_shared<ZeroPadding2DSpec>(padding.first.first, padding.first.second,
                                                padding.second.first, padding.second.second)) {}

}  // namespace layers
}  // namespace dist::keras
