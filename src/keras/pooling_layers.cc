// MaxPooling2D and GlobalAveragePooling2D (dist/keras/layers.h), with TensorFlow's window
// arithmetic (window_arithmetic.h): "same" max pooling pads with -inf, so padding never wins.
#include <cmath>

#include <torch/nn/functional/pooling.h>

#include "dist/core/error.h"
#include "dist/keras/layers.h"
#include "keras/layer_checks.h"
#include "keras/window_arithmetic.h"

namespace dist::keras {
namespace detail {
namespace {

namespace F = torch::nn::functional;

class MaxPooling2DSpec : public LayerSpec {
 public:
  explicit MaxPooling2DSpec(int64_t pool) : LayerSpec("MaxPooling2D"), pool(pool), strides(pool) {
    DIST_CHECK_ARG(pool >= 1, "MaxPooling2D needs pool_size >= 1, got ", pool);
  }
  std::string default_name() const override { return "max_pooling2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    int64_t h = window_output(in[0][1], pool, strides, padding);
    int64_t w = window_output(in[0][2], pool, strides, padding);
    DIST_CHECK_ARG(h >= 1 && w >= 1, describe(kind(), n), ": a ", pool, "x", pool,
                   " window does not fit input ", shape_to_string(in[0]));
    return {in[0][0], h, w};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor input = padding == "same" ? pad_same(x[0], pool, strides, -INFINITY) : x[0];
    return F::max_pool2d(input, F::MaxPool2dFuncOptions(pool).stride(strides));
  }

  int64_t pool, strides;
  std::string padding = "valid";
};

class GlobalAveragePooling2DSpec : public LayerSpec {
 public:
  GlobalAveragePooling2DSpec() : LayerSpec("GlobalAveragePooling2D") {}
  std::string default_name() const override { return "global_average_pooling2d"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    check_image(in, describe(kind(), n));
    return {in[0][0]};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return x[0].mean({2, 3});
  }
};

}  // namespace
}  // namespace detail

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

MaxPooling2D::MaxPooling2D(int64_t pool_size)
    : Layer(std::make_shared<MaxPooling2DSpec>(pool_size)) {}
MaxPooling2D& MaxPooling2D::strides(int64_t strides) {
  DIST_CHECK_ARG(strides >= 1, "MaxPooling2D strides must be at least 1, got ", strides);
  options_of<MaxPooling2DSpec>().strides = strides;
  return *this;
}
MaxPooling2D& MaxPooling2D::padding(const std::string& padding) {
  check_padding(padding);
  options_of<MaxPooling2DSpec>().padding = padding;
  return *this;
}

GlobalAveragePooling2D::GlobalAveragePooling2D()
    : Layer(std::make_shared<GlobalAveragePooling2DSpec>()) {}

}  // namespace layers
}  // namespace dist::keras
