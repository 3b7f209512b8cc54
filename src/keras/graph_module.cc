#include "graph_module.h"

#include <functional>
#include <map>
#include <set>

#include "dist/core/error.h"

namespace dist::keras::detail {

std::shared_ptr<const Graph> Graph::trace(const std::shared_ptr<const Node>& input,
                                          const std::shared_ptr<const Node>& output,
                                          bool sequential) {
  DIST_CHECK_ARG(input->layer == nullptr,
                 "Model: inputs must be made by keras::Input, not by a layer");
  auto graph = std::make_shared<Graph>();
  graph->sequential = sequential;
  std::map<const Node*, int> step_of;
  std::map<const LayerSpec*, int> layer_of;
  std::vector<LayerSpec*> unnamed;  // in graph order; named below, once
  // Depth-first from the output: a node's inputs get their steps before it, so the steps come
  // out in execution order, in the order the user wired the layers.
  std::function<int(const std::shared_ptr<const Node>&)> visit =
      [&](const std::shared_ptr<const Node>& node) -> int {
    if (auto it = step_of.find(node.get()); it != step_of.end()) return it->second;
    Step step;
    step.shape = node->shape;
    if (node->layer == nullptr) {
      DIST_CHECK_ARG(node == input,
                     "Model: the output depends on an Input that is not the "
                     "model's input; models here have exactly one input");
    } else {
      for (const auto& in : node->inputs) step.inputs.push_back(visit(in));
      auto [it, added] =
          layer_of.emplace(node->layer.get(), static_cast<int>(graph->layers.size()));
      if (added) {
        if (node->layer->name.empty()) unnamed.push_back(node->layer.get());
        graph->layers.push_back(node->layer);
        graph->layer_inputs.push_back(node->layer->built_for);
      }
      step.layer = it->second;
    }
    graph->steps.push_back(std::move(step));
    int index = static_cast<int>(graph->steps.size()) - 1;
    step_of[node.get()] = index;
    return index;
  };
  visit(output);
  DIST_CHECK_ARG(step_of.count(input.get()) == 1,
                 "Model: the output does not depend on the given input");
  DIST_INTERNAL_ASSERT(graph->steps.front().layer == -1, "the input must run first");

  // Names: explicit ones must be unique; the others get "<stem>", "<stem>_1", ... in order.
  std::set<std::string> taken;
  for (const auto& layer : graph->layers) {
    if (layer->name.empty()) continue;
    DIST_CHECK_ARG(taken.insert(layer->name).second, "Model: two layers are named '", layer->name,
                   "'; layer names must be unique within a model");
  }
  std::map<std::string, int> next_suffix;
  for (LayerSpec* layer : unnamed) {
    std::string stem = layer->default_name(), name;
    do {
      int n = next_suffix[stem]++;
      name = n == 0 ? stem : stem + "_" + std::to_string(n);
    } while (!taken.insert(name).second);
    layer->name = name;
  }
  return graph;
}

}  // namespace dist::keras::detail

namespace dist::keras {

FunctionalImpl::FunctionalImpl(std::shared_ptr<const detail::Graph> graph)
    : graph_(std::move(graph)) {
  reset();
}

FunctionalImpl::FunctionalImpl(const KerasTensor& inputs, const KerasTensor& outputs)
    : FunctionalImpl(detail::Graph::trace(inputs.node(), outputs.node(), /*sequential=*/false)) {}

void FunctionalImpl::reset() {
  modules_.assign(graph_->layers.size(), nullptr);
  for (size_t i = 0; i < graph_->layers.size(); ++i) {
    auto module = graph_->layers[i]->make_module(graph_->layer_inputs[i]);
    if (module) modules_[i] = register_module(graph_->layers[i]->name, std::move(module));
  }
  hooked_layer_.assign(graph_->steps.size(), -1);
  int hooked = 0;
  for (size_t s = 1; s < graph_->steps.size(); ++s)
    if (modules_[static_cast<size_t>(graph_->steps[s].layer)]) hooked_layer_[s] = hooked++;
}

std::vector<std::vector<at::Tensor>> FunctionalImpl::layer_parameters() {
  std::vector<std::vector<at::Tensor>> layers;
  for (size_t s = 1; s < graph_->steps.size(); ++s)
    if (hooked_layer_[s] >= 0)
      layers.push_back(modules_[static_cast<size_t>(graph_->steps[s].layer)]->parameters());
  return layers;
}

at::Tensor FunctionalImpl::forward(const at::Tensor& input) {
  const auto& steps = graph_->steps;
  const Shape& expected = steps.front().shape;
  bool fits = input.dim() == static_cast<int64_t>(expected.size()) + 1;
  for (size_t d = 0; fits && d < expected.size(); ++d)
    fits = input.size(static_cast<int64_t>(d) + 1) == expected[d];
  if (!fits) {
    std::string wanted = "(batch";
    for (int64_t d : expected) wanted += ", " + std::to_string(d);
    throw InvalidArgument(dist::detail::concat("model input has shape ", input.sizes(),
                                               " but the model expects ", wanted,
                                               ") (images channels first)"));
  }
  std::vector<at::Tensor> values(steps.size());
  values[0] = input;
  for (size_t s = 1; s < steps.size(); ++s) {
    const auto& step = steps[s];
    std::vector<at::Tensor> inputs;
    inputs.reserve(step.inputs.size());
    for (int i : step.inputs) inputs.push_back(values[static_cast<size_t>(i)]);
    const size_t layer = static_cast<size_t>(step.layer);
    const int hooked = hooked_layer_[s];
    if (hooked >= 0) before_layer(static_cast<size_t>(hooked));
    values[s] = graph_->layers[layer]->call(modules_[layer].get(), inputs, is_training());
    if (hooked >= 0) after_layer(static_cast<size_t>(hooked), values[s]);
  }
  return values.back();
}

}  // namespace dist::keras
