// Sharding: how much of a model's training state the workers split between them instead of
// each keeping all of it (the stages of ZeRO, arXiv:1910.02054; PyTorch's
// ZeroRedundancyOptimizer and FSDP). Each worker steps the optimizer over its chunk of each
// gradient pack only; a checkpoint written under any level restores under any strategy and
// worker count. In one process there is one worker: a level moves the state, not its size.
//
//   MultiWorkerMirroredOptions options;
//   options.sharding = Sharding::kOptimizer;  // dist-train --sharding optimizer
//
// The bytes each level sends, what stage 3 asks of the model and why: docs/design.md,
// "Sharding: ZeRO stages 1 and 2" and "Sharding: ZeRO stage 3 (parameters)".
#pragma once

#include <string>

namespace dist {

enum class Sharding {
  kNone,       // every worker keeps the whole optimizer state and steps every element
  kOptimizer,  // each keeps the slots (Adam's moments) of its chunks only, 1/N (ZeRO 1)
  kGradients,  // and frees a pack's full-size gradients once its chunk's sums came (ZeRO 2)
  // And keeps 1/N of each parameter, gathering a layer's whole just in time for its forward
  // and backward (ZeRO 3, FSDP). The model is a torch::nn::Sequential or a dist::LayeredModule
  // (layered_module.h) of one replica per worker, called inside strategy.run(). Between steps
  // the parameters are empty: read them after DistributedVariables::gather_values().
  kParameters
};

// "none", "optimizer", "gradients", "parameters".
std::string to_string(Sharding sharding);
// The inverse of to_string; InvalidArgument naming `text` and the choices otherwise.
Sharding parse_sharding(const std::string& text);

}  // namespace dist
