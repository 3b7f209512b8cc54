// The sharded optimizer step (Sharding, include/dist/distribute/sharding.h): ZeRO's stages 1
// to 3 over the overlapped reducer's packs (stage 3's parameters: parameter_shards.h).
//
// Each pack of gradients is cut into one chunk per worker (collective::chunk_range over its
// flat elements). Its exchange is a reduce-scatter: worker w receives the sums of chunk w only,
// in a buffer kept per (model, pack) (ShardingState). As each pack lands, the model's
// ShardedStep steps an optimizer of the user's kind over views of chunk w of the parameters,
// whose gradients are views of those sums and whose slots are therefore 1/N of the whole, and
// then all-gathers the chunk's new values; step() waits for the gathers and writes every
// worker's chunks into the parameters. So every worker holds the same parameters after the
// step, and each element was updated once, by its chunk's owner, from the sums of every
// worker's gradients: the arithmetic of one device on the global batch.
//
// The user's optimizer keeps its param groups (learning rates, copied into the chunk
// optimizers at every step) but no slots: between steps those live in the chunk optimizers. A
// checkpoint below stage 3 gathers them into it (gather_slots, a collective); a state found in
// it at the start of a step (restored from a checkpoint of any strategy or worker count, or
// gathered) is cut into this worker's chunks and dropped from it. At stage 3 a checkpoint
// writes and reads each worker's shares of the slots (restore_slot_shares), never whole.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "dist/distribute/sharding.h"
#include "distribute/reduction/gradient_reducer.h"
#include "distribute/step/optimizer_step_plan.h"
#include "distribute/step/parameter_shards.h"

namespace dist {

// What a sharded strategy keeps per model, shared by its exchange and its step plans: this
// worker's chunk of the sums of each (model, pack), written by the sharded exchange and read by
// the model's ShardedStep; at stage 3, the model's ParameterShards.
class ShardingState {
 public:
  // The chunk buffer of pack `pack` of model `model`, made on first use: chunk `rank` of
  // `size` of a pack of `elements` elements of `options`, of zeros if `zeroed` (else uninitialized:
  // for a reduce-scatter, which writes every element).
  at::Tensor chunk(int model, size_t pack, int64_t elements, const at::TensorOptions& options,
                   int rank, int size, bool zeroed);
  // Lets go of the chunk buffer (stage 3, after the step that read it); chunk() makes another.
  void drop_chunk(int model, size_t pack);
  void set_parameter_shards(int model, std::shared_ptr<ParameterShards> shards);
  // Null below stage 3.
  std::shared_ptr<ParameterShards> parameter_shards(int model);

 private:
  std::mutex mu_;
  std::map<std::pair<int, size_t>, at::Tensor> chunks_;
  std::map<int, std::shared_ptr<ParameterShards>> parameter_shards_;
};

// The packs' exchange at `sharding` (not kNone): a reduce-scatter SUM into `state`'s chunks;
// at stage 3 it releases each pack's parameters once its gradients are summed.
PackExchange sharded_exchange(std::shared_ptr<ShardingState> state, Sharding sharding);

// The step plan of a sharded strategy, reading its sums from `state`. At stage 3 it steps the
// model's ParameterShards::owned() chunks and gathers nothing (the next forward does).
MakeStepPlan sharded_step_plan(std::shared_ptr<ShardingState> state);

// Makes the parameters of each pack (make_packs over `module`'s parameters, the packs its
// reducer will make) views of one contiguous buffer, in pack order, so that a chunk of a pack
// is a range of one tensor: the sharded step then sends its chunk without a copy and gathers
// the others straight into the parameters. Values are unchanged. Before the model is mirrored
// (the copies then share these buffers).
void place_packs_contiguously(torch::nn::Module& module, int64_t bytes_per_pack);

}  // namespace dist
