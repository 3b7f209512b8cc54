// The graph behind a keras::Model and keras::Functional: the layers in execution order. The
// module (Functional) has one child module per layer that has weights, registered under the
// layer's name. It derives from torch::nn::Cloneable so that strategies can copy it per
// replica: clone() copy-constructs, calls reset() to make fresh child modules from the
// (shared, immutable) graph, then copies the weights over.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/keras/functional.h"
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

// The module is public as keras::Functional (dist/keras/functional.h).
using GraphModuleImpl = FunctionalImpl;
using GraphModule = Functional;

}  // namespace dist::keras::detail
