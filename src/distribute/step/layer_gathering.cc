// Stage 3's layers of a model (layer_gathering.h).
#include "distribute/step/layer_gathering.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <unordered_map>
#include <utility>

#include "dist/core/error.h"
#include "dist/distribute/layered_module.h"
#include "distribute/step/parameter_shards.h"

namespace dist {
namespace {

// The strategy's side of the hooks: a layer's parameters are whole while it computes, and
// again from just before its backward (parameter_shards.h).
class ShardGatheringHooks : public LayerHooks {
 public:
  explicit ShardGatheringHooks(std::shared_ptr<ParameterShards> shards)
      : shards_(std::move(shards)) {}

  void before_layer(size_t layer) override { shards_->before_forward(layer); }

  void after_layer(size_t layer, const at::Tensor& output) override {
    const bool backward_follows = at::GradMode::is_enabled() && output.requires_grad();
    if (backward_follows) {
      // Runs when the gradient of the output is ready: just before the layer's backward.
      output.register_hook(
          [shards = shards_, layer](const at::Tensor&) { shards->before_backward(layer); });
    }
    shards_->after_forward(layer, backward_follows);
  }

 private:
  std::shared_ptr<ParameterShards> shards_;
};

// In front of one child of a Sequential, which has no hooks of its own.
class GatheringUnit : public torch::nn::Module {
 public:
  GatheringUnit(torch::nn::AnyModule child, std::shared_ptr<LayerHooks> hooks, size_t layer)
      : child_(std::move(child)), hooks_(std::move(hooks)), layer_(layer) {}

  at::Tensor forward(at::Tensor input) {
    hooks_->before_layer(layer_);
    at::Tensor output = child_.forward<at::Tensor>(std::move(input));
    hooks_->after_layer(layer_, output);
    return output;
  }

 private:
  torch::nn::AnyModule child_;
  std::shared_ptr<LayerHooks> hooks_;
  size_t layer_;
};

torch::nn::SequentialImpl& as_sequential(torch::nn::Module& module) {
  auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&module);
  DIST_CHECK_ARG(sequential != nullptr,
                 "sharding 'parameters' (ZeRO stage 3) gathers each layer's parameters just "
                 "before the layer computes, which it can do for a torch::nn::Sequential's "
                 "children and a dist::LayeredModule's layers (keras::Functional is one; "
                 "LibTorch's C++ modules have no forward hooks); model '",
                 module.name(),
                 "' is neither: build it as a Sequential of its blocks, derive it from "
                 "dist::LayeredModule, or use sharding 'gradients'");
  return *sequential;
}

std::vector<std::vector<at::Tensor>> layer_parameters(torch::nn::Module& module) {
  if (auto* layered = dynamic_cast<LayeredModule*>(&module)) {
    DIST_CHECK_ARG(!layered->has_layer_hooks(), "sharding 'parameters': model '", module.name(),
                   "' was placed before (its layers gather already); place a model once");
    return layered->layer_parameters();
  }
  std::vector<std::vector<at::Tensor>> layers;
  for (auto& child : as_sequential(module)) layers.push_back(child.ptr()->parameters());
  return layers;
}

}  // namespace

std::vector<std::vector<size_t>> parameter_units(torch::nn::Module& module,
                                                 const std::vector<at::Tensor>& params) {
  std::unordered_map<const void*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = i;
  std::vector<bool> taken(params.size(), false);
  std::vector<std::vector<size_t>> units;
  for (const auto& layer : layer_parameters(module)) {
    std::vector<size_t> unit;
    for (const auto& p : layer) {
      auto found = index.find(p.unsafeGetTensorImpl());
      DIST_CHECK_ARG(found != index.end(), "sharding 'parameters': layer ", units.size(),
                     " of model '", module.name(), "' names a parameter of shape ", p.sizes(),
                     " that is not among the model's parameters; a layer's parameters must be "
                     "registered with the model");
      const size_t i = found->second;
      DIST_CHECK_ARG(!taken[i], "sharding 'parameters': a parameter of shape ", p.sizes(),
                     " belongs to two layers of model '", module.name(),
                     "' (shared weights); each layer's parameters are gathered and released on "
                     "their own, so they cannot be shared: use sharding 'gradients'");
      taken[i] = true;
      unit.push_back(i);
    }
    units.push_back(std::move(unit));  // possibly empty: the layer then computes as it is
  }
  for (size_t i = 0; i < params.size(); ++i)
    DIST_CHECK_ARG(taken[i], "sharding 'parameters': a parameter of shape ", params[i].sizes(),
                   " is in no layer of model '", module.name(),
                   "' (registered on the model itself, or the model was placed before, so its "
                   "layers gather already); give each parameter to one layer, and place a "
                   "model once");
  return units;
}

void gather_by_units(torch::nn::Module& module, std::shared_ptr<ParameterShards> shards) {
  auto hooks = std::make_shared<ShardGatheringHooks>(std::move(shards));
  if (auto* layered = dynamic_cast<LayeredModule*>(&module)) {
    layered->set_layer_hooks(std::move(hooks));
    return;
  }
  size_t layer = 0;
  for (auto& child : as_sequential(module)) {
    const size_t k = layer++;
    if (child.ptr()->parameters().empty()) continue;
    child = torch::nn::AnyModule(std::make_shared<GatheringUnit>(child, hooks, k));
  }
}

}  // namespace dist
