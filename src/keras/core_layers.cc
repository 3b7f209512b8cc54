// The layers without windows (dist/keras/layers.h): Dense, Flatten, ReLU and Add.
#include <torch/nn/modules/linear.h>

#include "dist/core/error.h"
#include "dist/keras/layers.h"
#include "keras/layer_checks.h"

namespace dist::keras {
namespace detail {
namespace {

class DenseSpec : public LayerSpec {
 public:
  DenseSpec(int64_t units, std::string activation)
      : LayerSpec("Dense"), units(units), activation(std::move(activation)) {
    DIST_CHECK_ARG(units >= 1, "Dense needs units >= 1, got ", units);
    check_activation(this->activation);
  }
  std::string default_name() const override { return "dense"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    DIST_CHECK_ARG(!in[0].empty(), describe(kind(), n),
                   " needs at least one axis per example, "
                   "got a scalar");
    Shape out = in[0];
    out.back() = units;
    return out;
  }
  std::shared_ptr<torch::nn::Module> make_module(const std::vector<Shape>& in) const override {
    return std::make_shared<torch::nn::LinearImpl>(
        torch::nn::LinearOptions(in[0].back(), units).bias(use_bias));
  }
  at::Tensor call(torch::nn::Module* m, const std::vector<at::Tensor>& x, bool) const override {
    return activate(dynamic_cast<torch::nn::LinearImpl*>(m)->forward(x[0]), activation, -1);
  }

  int64_t units;
  std::string activation;
  bool use_bias = true;
};

class FlattenSpec : public LayerSpec {
 public:
  FlattenSpec() : LayerSpec("Flatten") {}
  std::string default_name() const override { return "flatten"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    int64_t size = 1;
    for (int64_t d : in[0]) size *= d;
    return {size};
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return x[0].flatten(1);
  }
};

class ReLUSpec : public LayerSpec {
 public:
  ReLUSpec() : LayerSpec("ReLU") {}
  std::string default_name() const override { return "re_lu"; }
  Shape output_shape(const std::vector<Shape>& in, const std::string&) const override {
    return in[0];
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    return torch::relu(x[0]);
  }
};

class AddSpec : public LayerSpec {
 public:
  AddSpec() : LayerSpec("Add") {}
  std::string default_name() const override { return "add"; }
  int arity() const override { return 0; }
  Shape output_shape(const std::vector<Shape>& in, const std::string& n) const override {
    DIST_CHECK_ARG(in.size() >= 2, describe(kind(), n), " needs two or more inputs, got ",
                   in.size());
    for (const Shape& s : in)
      DIST_CHECK_ARG(s == in[0], describe(kind(), n), " needs inputs of one shape, got ",
                     shape_to_string(in[0]), " and ", shape_to_string(s));
    return in[0];
  }
  at::Tensor call(torch::nn::Module*, const std::vector<at::Tensor>& x, bool) const override {
    at::Tensor sum = x[0] + x[1];
    for (size_t i = 2; i < x.size(); ++i) sum = sum + x[i];
    return sum;
  }
};

}  // namespace
}  // namespace detail

namespace layers {

using namespace detail;  // NOLINT: the specs are this file's own

Dense::Dense(int64_t units, const std::string& activation)
    : Layer(std::make_shared<DenseSpec>(units, activation)) {}
Dense& Dense::use_bias(bool use_bias) {
  options_of<DenseSpec>().use_bias = use_bias;
  return *this;
}

Flatten::Flatten() : Layer(std::make_shared<FlattenSpec>()) {}
ReLU::ReLU() : Layer(std::make_shared<ReLUSpec>()) {}
Add::Add() : Layer(std::make_shared<AddSpec>()) {}

}  // namespace layers
}  // namespace dist::keras
