// Conv2D (dist/keras/layers.h): TensorFlow's window arithmetic and "same" padding
// (window_arithmetic.h) over LibTorch's convolution, fed channels-last activations.
#include <torch/nn/modules/conv.h>

#include "dist/core/error.h"
#include "dist/keras/layers.h"
#include "keras/channels_last.h"
#include "keras/layer_checks.h"
#include "keras/window_arithmetic.h"

namespace dist::keras {
namespace detail {
namespace {

class Conv2DSpec : public LayerSpec {
 public:
  Conv2DSpec(int64_t filters, int64_t kernel)
      : LayerSpec("Conv2D"), filters(filters), kernel(kernel) {
    DIST_CHECK_ARG(filters >= 1 && kernel >= 1,
                   "Conv2D needs filters >= 1 and kernel_size >= 1, "
                   "got ",
                   filters, " and ", kernel);
  }
  std::string default_name() const override { return "conv2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    int64_t h = window_output(in[0][1], kernel, strides, padding);
    int64_t w = window_output(in[0][2], kernel, strides, padding);
    DIST_CHECK_ARG(h >= 1 && w >= 1, describe(kind(), n), ": a ", kernel, "x", kernel,
                   " kernel does not fit input ", shape_to_string(in[0]),
                   " with padding \"valid\"; use a larger input or padding \"same\"");
    return {filters, h, w};
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    auto options =
        torch::nn::Conv2dOptions(in[0][0], filters, kernel).stride(strides).bias(use_bias);
    // Even "same" padding is the convolution's own zero padding: no padded copy of the input.
    if (symmetric_same()) options.padding(kernel / 2);
    return std::make_shared<torch::nn::Conv2dImpl>(options);
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor input =
        padding == "same" && !symmetric_same() ? pad_same(x[0], kernel, strides, 0.0) : x[0];
    // Channels-last activations run 1.5x faster through oneDNN (keras/channels_last.h);
    // a view when the input already is channels-last, as every later layer's is.
    input = to_channels_last(input);
    return activate(dynamic_cast<torch::nn::Conv2dImpl*>(m)->forward(input), activation, 1);
  }

  // Stride 1 with an odd kernel pads (kernel - 1) / 2 on every side.
  bool symmetric_same() const { return padding == "same" && strides == 1 && kernel % 2 == 1; }

  int64_t filters, kernel, strides = 1;
  std::string padding = "valid", activation;
  bool use_bias = true;
};

}  // namespace
}  // namespace detail

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

Conv2D::Conv2D(int64_t filters, int64_t kernel_size)
    : Layer(std::make_shared<Conv2DSpec>(filters, kernel_size)) {}
Conv2D& Conv2D::strides(int64_t strides) {
  DIST_CHECK_ARG(strides >= 1, "Conv2D strides must be at least 1, got ", strides);
  options_of<Conv2DSpec>().strides = strides;
  return *this;
}
Conv2D& Conv2D::padding(const std::string& padding) {
  check_padding(padding);
  options_of<Conv2DSpec>().padding = padding;
  return *this;
}
Conv2D& Conv2D::activation(const std::string& activation) {
  check_activation(activation);
  options_of<Conv2DSpec>().activation = activation;
  return *this;
}
Conv2D& Conv2D::use_bias(bool use_bias) {
  options_of<Conv2DSpec>().use_bias = use_bias;
  return *this;
}

}  // namespace layers
}  // namespace dist::keras
