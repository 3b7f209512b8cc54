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

#include <cstdint>
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

// Sharding::kParameters keeps a layer whole from its forward to its backward (one gather a step
// instead of two) when the layers after it hold at most this many bytes of parameters, unless
// the options' sharding_reuse_bytes says otherwise: a model of up to 256 MiB of parameters
// (64M in float32) is gathered once a step, the bytes of an all-reduce; a larger one keeps its
// last layers up to 256 MiB whole at the turn to backward and gathers the others twice. In the
// spirit of DeepSpeed's stage3_max_reuse_distance and stage3_max_live_parameters (1e9
// elements each by default), smaller because these are bytes on CPUs.
inline constexpr int64_t kDefaultShardingReuseBytes = int64_t{256} << 20;

// "none", "optimizer", "gradients", "parameters".
std::string to_string(Sharding sharding);
// The inverse of to_string; InvalidArgument naming `text` and the choices otherwise.
Sharding parse_sharding(const std::string& text);

}  // namespace dist
