// Sharding: how much of a model's training state the workers split between them instead of
// each keeping all of it (the stages of ZeRO, arXiv:1910.02054; PyTorch's
// ZeroRedundancyOptimizer and FSDP).
//
// Every level reduce-scatters each gradient pack (worker w gets the sums of its chunk w of the
// pack) and steps the optimizer over its chunks only. Stages 1 and 2 then all-gather the
// updated parameters: the bytes of one all-reduce, and every worker holds the same parameters
// after each step. Stage 3 gathers each layer's parameters before its forward and again before
// its backward: 1.5x the bytes of one all-reduce, less what the options' sharding_reuse_bytes
// keeps whole from forward to backward (-1: every layer, the bytes of one all-reduce).
//   kNone        every worker keeps the whole optimizer state and steps every element;
//   kOptimizer   each worker keeps the optimizer state ("slots": Adam's two moments) of its
//                chunks only: 1/N of it (ZeRO stage 1);
//   kGradients   as kOptimizer, and a pack's full-size gradient buffers are freed as soon as its
//                chunk of sums has arrived: between steps a worker holds its chunks' sums only
//                (ZeRO stage 2);
//   kParameters  as kGradients, and parameters too are kept as chunks, gathered just in time
//                for each layer's forward and backward and released after it (ZeRO stage 3,
//                FSDP): a worker holds 1/N of every parameter plus the layer it computes. The
//                model must be a torch::nn::Sequential (its children are the layers gathered
//                one at a time: LibTorch's modules have no forward hooks) or a
//                dist::LayeredModule (layered_module.h: keras::Functional, or a module of
//                your own that names its layers), of one replica per worker. Between steps the
//                parameters are empty tensors on every worker (a sum over one is 0, so read them
//                only after DistributedVariables::gather_values(), a collective). A Checkpoint
//                gathers nothing: it is written in pieces, every worker its own ranges
//                (Checkpoint::written_in_pieces), and each worker reads its own share of one. Every
//                parameter is a gradient pack of its own (bytes_per_pack does not apply). The model
//                is called inside strategy.run() on every worker (each call gathers), or after
//                gather_values(). Under bf16 autocast the cast copies of the weights (half their
//                size) live from forward to backward, so less is saved.
// In one process (MirroredStrategy) there is one worker: its chunk is everything, so a level
// changes where the state lives, not how much there is.
//
// The optimizer state then lives with the strategy, not in the optimizer object: below stage 3
// a Checkpoint gathers it (Checkpoint::gather_worker_states, a collective every worker calls
// before the chief writes) and writes the ordinary unsharded format; at stage 3 every worker
// writes its ranges in a piece. Either restores under any strategy and worker count; a
// restored state is cut into the new job's chunks at its next step.
#pragma once

#include <string>

namespace dist {

enum class Sharding { kNone, kOptimizer, kGradients, kParameters };

// "none", "optimizer", "gradients", "parameters".
std::string to_string(Sharding sharding);
// The inverse of to_string; InvalidArgument naming `text` and the choices otherwise.
Sharding parse_sharding(const std::string& text);

}  // namespace dist
