// keras::Functional: a graph of Keras layers as a LibTorch module, for custom training loops
// that hold several models (a GAN's generators and discriminators) and mirror each one.
//
//   using namespace dist::keras;
//   KerasTensor x = Input({1, 32, 32});
//   KerasTensor y = layers::Conv2D(8, 3).padding("same")(x);
//   Functional generator(x, layers::Activation("tanh")(y));
//   auto gen = strategy.mirror(generator);          // dist::Mirrored<Functional>
//   strategy.run([&](const Element& b) { auto fake = gen->forward(b[0]); ... }, batch);
//
// It is what a keras::Model runs (Model adds compile, fit and evaluate): weights are named
// "<layer name>.weight", made by LibTorch's initializers, and the module can be cloned per
// replica. One input, one output; shapes are per example, channels first. Its layers are those
// of a dist::LayeredModule (each call of a layer that has a module, in execution order), so
// sharding 'parameters' gathers them one at a time.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include "dist/distribute/layered_module.h"
#include "dist/keras/layers.h"

namespace dist::keras {

namespace detail {
struct Graph;
}

class FunctionalImpl : public torch::nn::Cloneable<FunctionalImpl>, public LayeredModule {
 public:
  // Every layer between `inputs` and `outputs`; InvalidArgument when the output does not
  // depend on `inputs` alone.
  FunctionalImpl(const KerasTensor& inputs, const KerasTensor& outputs);
  explicit FunctionalImpl(std::shared_ptr<const detail::Graph> graph);

  // Makes fresh child modules from the graph (LibTorch's initializers).
  void reset() override;
  // InvalidArgument naming both shapes when `input` is not a batch of the input shape.
  at::Tensor forward(const at::Tensor& input);

  const detail::Graph& graph() const { return *graph_; }
  // The child module of layer i, or nullptr for a layer without weights.
  torch::nn::Module* layer_module(size_t i) const { return modules_[i].get(); }
  // Per call of a layer with weights, in execution order, the layer's parameters.
  std::vector<std::vector<at::Tensor>> layer_parameters() override;

 private:
  std::shared_ptr<const detail::Graph> graph_;
  std::vector<std::shared_ptr<torch::nn::Module>> modules_;  // per layer
  std::vector<int> hooked_layer_;  // per step: its index among layer_parameters(), or -1
};
TORCH_MODULE(Functional);

}  // namespace dist::keras
