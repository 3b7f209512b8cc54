// Where stage 3 gathers: a model's layers, in the order they compute. A dist::LayeredModule
// (keras::Functional, or a user's module) names them and calls LayerHooks itself; the children
// of a torch::nn::Sequential are its layers, and a GatheringUnit put in front of each calls
// the hooks (the Sequential calls the unit, which gathers, calls the child and lets go).
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace dist {

class ParameterShards;

// The units of `module`: per layer, in the order they compute, the indices of its parameters
// in `params` (module.parameters()); a layer without parameters is an empty unit.
// InvalidArgument when `module` is neither a LayeredModule nor a Sequential, when a parameter
// is in two layers (shared weights) or in none.
std::vector<std::vector<size_t>> parameter_units(torch::nn::Module& module,
                                                 const std::vector<at::Tensor>& params);
// From now on `module`'s forward gathers each layer's parameters from `shards` before the layer
// computes and releases them after. Registered names, parameters and buffers are unchanged.
void gather_by_units(torch::nn::Module& module, std::shared_ptr<ParameterShards> shards);

}  // namespace dist
