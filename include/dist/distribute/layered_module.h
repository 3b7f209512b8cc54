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
// A layer is any group of parameters that compute together; the more layers, the less is whole
// at once. Every parameter of the model belongs to exactly one layer, and a layer computes once
// per forward (a layer called twice shares its weights between two places: not shardable).
// The hooks gather across workers: every worker must call them for the same layers in the same
// order (no branch on data that differs between workers). The tensor given to after_layer must
// be the one the rest of the model computes from (its gradient is what tells the strategy that
// the layer's backward is next); a layer whose parameters reach the loss another way finds
// them released in backward and fails on their shape.
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
