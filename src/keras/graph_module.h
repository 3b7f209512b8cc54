// The LibTorch module behind a keras::Model: the model's layer graph in execution order, with
// one child module per layer that has weights, registered under the layer's name.
//
// It derives from torch::nn::Cloneable so that strategies can copy it per replica: clone()
// copy-constructs, calls reset() to make fresh child modules from the (shared, immutable)
// graph, then copies the weights over.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include "dist/keras/layers.h"

namespace dist::keras::detail {

struct Graph {
  struct Step {
    int layer = -1;           // index into layers; -1 for the input
    std::vector<int> inputs;  // indices of earlier steps
    Shape shape;
  };
  std::vector<Step> steps;  // in execution order; steps[0] is the input, the last the output
  std::vector<std::shared_ptr<const LayerSpec>> layers;  // each once, named uniquely
  std::vector<std::vector<Shape>> layer_inputs;          // each layer's input shapes
  bool sequential = false;

  // Orders the nodes from input to output and names unnamed layers Keras' way ("dense",
  // "dense_1", ...). InvalidArgument when output does not depend on input only.
  static std::shared_ptr<const Graph> trace(const std::shared_ptr<const Node>& input,
                                            const std::shared_ptr<const Node>& output,
                                            bool sequential);
};

class GraphModuleImpl : public torch::nn::Cloneable<GraphModuleImpl> {
 public:
  explicit GraphModuleImpl(std::shared_ptr<const Graph> graph);

  // Makes fresh child modules from the graph (LibTorch's initializers).
  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  const Graph& graph() const { return *graph_; }
  // The child module of layer i, or nullptr for a layer without weights.
  torch::nn::Module* layer_module(size_t i) const { return modules_[i].get(); }

 private:
  std::shared_ptr<const Graph> graph_;
  std::vector<std::shared_ptr<torch::nn::Module>> modules_;  // per layer
};
TORCH_MODULE(GraphModule);

}  // namespace dist::keras::detail
