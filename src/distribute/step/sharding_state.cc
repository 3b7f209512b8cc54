// ShardingState and the reduce-scatter exchange of a sharded step (sharded_step.h): the chunks
// of gradient sums each worker keeps between its reduce-scatter and its step; and the packs'
// parameters placed as one buffer each, so that a chunk of a pack is a range of one tensor.
#include <ATen/ATen.h>

#include <mutex>
#include <utility>

#include "collective/communicator.h"
#include "dist/core/error.h"
#include "distribute/step/sharded_step.h"

namespace dist {

at::Tensor ShardingState::chunk(int model, size_t pack, int64_t elements,
                                const at::TensorOptions& options, int rank, int size, bool zeroed) {
  std::lock_guard<std::mutex> lock(mu_);
  at::Tensor& chunk = chunks_[{model, pack}];
  if (!chunk.defined()) {
    const auto [begin, end] = collective::chunk_range(elements, size, rank);
    chunk = zeroed ? at::zeros({end - begin}, options) : at::empty({end - begin}, options);
  }
  return chunk;
}

void ShardingState::drop_chunk(int model, size_t pack) {
  std::lock_guard<std::mutex> lock(mu_);
  chunks_.erase({model, pack});
}

void ShardingState::set_parameter_shards(int model, std::shared_ptr<ParameterShards> shards) {
  std::lock_guard<std::mutex> lock(mu_);
  parameter_shards_[model] = std::move(shards);
}

std::shared_ptr<ParameterShards> ShardingState::parameter_shards(int model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = parameter_shards_.find(model);
  return it == parameter_shards_.end() ? nullptr : it->second;
}

PackExchange sharded_exchange(std::shared_ptr<ShardingState> state, Sharding sharding) {
  DIST_INTERNAL_ASSERT(sharding != Sharding::kNone, "a sharded exchange without sharding");
  PackExchange exchange;
  exchange.lands_in_gradients = false;  // this worker's sums are its chunk, not every gradient
  exchange.frees_gradients = sharding != Sharding::kOptimizer;
  // Stage 2 across hosts reduce-scatters on the collective thread behind backward: two packs
  // on their way at most (the one on the wire and the next), not every gradient of the model.
  if (sharding == Sharding::kGradients) exchange.packs_in_flight = 2;
  // The reduce-scatter only reads the pack: kept gradients can live in it (one copy, not two).
  exchange.gradients_in_pack = sharding == Sharding::kOptimizer;
  const bool wait_in_call = sharding == Sharding::kParameters;
  exchange.communicate = [state, wait_in_call](collective::Communicator& cross,
                                               GradientPack& pack) {
    at::Tensor sums = state->chunk(pack.model, pack.index, pack.buffer.numel(),
                                   pack.buffer.options(), cross.rank(), cross.size(),
                                   /*zeroed=*/false);
    auto work = cross.reduce_scatter(pack.buffer, sums, ReduceOp::kSum);
    // Stage 3's collectives run on a thread of their own (prefetch): waiting here frees each
    // pack of gradients as soon as it is summed, as when the ring ran in the call, instead of
    // holding every pack until backward ends.
    if (wait_in_call) work->wait();
    return work;
  };
  if (sharding == Sharding::kParameters) {
    exchange.summed = [state](int model, const std::vector<at::Tensor>& params) {
      auto shards = state->parameter_shards(model);
      DIST_INTERNAL_ASSERT(shards != nullptr, "stage 3 without the model's parameter shards");
      for (const auto& p : params) shards->release_parameter(p);
    };
  }
  return exchange;
}

void place_packs_contiguously(torch::nn::Module& module, int64_t bytes_per_pack) {
  auto params = module.parameters();
  if (params.empty()) return;
  at::NoGradGuard no_grad;
  for (const auto& pack : make_packs(params, bytes_per_pack)) {
    int64_t elements = 0;
    for (size_t i : pack) elements += params[i].numel();
    at::Tensor buffer = at::empty({elements}, params[pack.front()].options());
    int64_t offset = 0;
    for (size_t i : pack) {
      at::Tensor view = buffer.narrow(0, offset, params[i].numel()).view(params[i].sizes());
      view.copy_(params[i].detach());
      params[i].set_data(view);
      offset += params[i].numel();
    }
  }
}

}  // namespace dist
