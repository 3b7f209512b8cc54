// LayeredModule: a model whose forward computes its layers one at a time and says when, so that
// sharding 'parameters' (ZeRO stage 3, sharding.h) can gather each layer's parameters just
// before it computes and release them after. LibTorch's C++ modules have no forward hooks: a
// model tells the strategy itself.
//
// keras::Functional (and so every keras::Model) is one; a torch::nn::Sequential is gathered by
// its children without it. A module of your own becomes one by deriving from LayeredModule
// too (beside torch::nn::Module), naming its layers and calling before_layer and after_layer
// around each in its forward (they do nothing unless a strategy set hooks):
//
//   struct NetImpl : torch::nn::Module, dist::LayeredModule {
//     at::Tensor forward(at::Tensor x) {
//       before_layer(0);
//       x = conv->forward(x);
//       after_layer(0, x);
//       ...
//     }
//     std::vector<std::vector<at::Tensor>> layer_parameters() override {
//       return {conv->parameters(), ...};
//     }
//   };
//
// Rules: every parameter belongs to exactly one layer, and a layer computes once per forward (a
// layer called twice is not shardable); every worker calls the hooks for the same layers in the
// same order; after_layer gets the tensor the rest of the model computes from (its gradient
// tells the strategy that the layer's backward is next; parameters that reach the loss another
// way are found released in backward and fail on their shape). More layers, less whole at once.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dist {

// What the strategy does around each layer. A module calls them in the order its layers compute.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  // Layer `layer` is about to compute: its parameters are whole when this returns.
  virtual void before_layer(size_t layer) = 0;
  // Layer `layer` computed `output` (what the layers after it take). The hooks may register a
  // gradient hook on it (the layer is gathered again before its backward).
  virtual void after_layer(size_t layer, const at::Tensor& output) = 0;
};

class LayeredModule {
 public:
  LayeredModule() = default;
  // A copy (clone() per replica, a snapshot) does not keep the hooks: they gather the
  // parameters of this module.
  LayeredModule(const LayeredModule&) {}
  LayeredModule& operator=(const LayeredModule&) {
    hooks_ = nullptr;
    return *this;
  }
  virtual ~LayeredModule() = default;

  // Each layer's parameters, in the order the layers compute.
  virtual std::vector<std::vector<at::Tensor>> layer_parameters() = 0;

  // Set by the strategy that places the module; nullptr stops them.
  void set_layer_hooks(std::shared_ptr<LayerHooks> hooks) { hooks_ = std::move(hooks); }
  bool has_layer_hooks() const { return hooks_ != nullptr; }

 protected:
  // For forward: around each layer, in the order the layers compute.
  void before_layer(size_t layer) const {
    if (hooks_) hooks_->before_layer(layer);
  }
  void after_layer(size_t layer, const at::Tensor& output) const {
    if (hooks_) hooks_->after_layer(layer, output);
  }

 private:
  std::shared_ptr<LayerHooks> hooks_;
};

}  // namespace dist
