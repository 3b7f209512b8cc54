// The sharded optimizer step (sharded_step.h).
#include "distribute/step/sharded_step.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "collective/communicator.h"
#include "collective/hierarchical_communicator.h"
#include "core/optimizer_kinds.h"
#include "dist/core/error.h"
#include "dist/core/timeline.h"
#include "distribute/step/optimizer_slots.h"

namespace dist {

namespace {

using detail::OptimizerKind;
using detail::OptimizerWithKind;
using torch::optim::Optimizer;

// Elements [chunk_offset, chunk_offset + length) of this worker's chunk are elements
// [param_offset, ...) of parameter `param` of the pack.
struct ChunkPiece {
  size_t param = 0;
  int64_t param_offset = 0;
  int64_t chunk_offset = 0;
  int64_t length = 0;
  at::Tensor values;  // a view of those elements: the chunk optimizer's parameter
};

// One pack as this worker shards it.
struct ShardedPack {
  std::vector<at::Tensor> params;  // replica 0's, in pack order
  std::vector<int64_t> offsets;    // of each parameter in the pack's flat elements
  std::vector<int> group;          // each parameter's group in the optimizer; -1: not in it
  int64_t elements = 0;
  int64_t begin = 0, end = 0;  // this worker's chunk
  at::Tensor sums;             // the chunk's gradient sums (ShardingState)
  // The parameters as one tensor, when they are views of one buffer in pack order
  // (place_packs_contiguously); else undefined, and chunks are copied out and back.
  at::Tensor flat;
  std::vector<ChunkPiece> pieces;
  std::unique_ptr<Optimizer> optimizer;  // over the pieces of parameters in the optimizer
  at::Tensor outgoing, gathered;
  collective::WorkHandle gather;
};

std::unordered_map<const void*, int> optimizer_groups_of(const Optimizer& optimizer) {
  std::unordered_map<const void*, int> group;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    for (const auto& p : groups[g].params()) group[p.unsafeGetTensorImpl()] = static_cast<int>(g);
  return group;
}

// The slots `optimizer` keeps for a parameter of group `g` (Adam: step, exp_avg and exp_avg_sq,
// and max_exp_avg_sq with amsgrad): what one step of an optimizer of its kind and options makes
// for a one-element parameter. Every worker asks this of the same optimizer, so all of them
// gather the same slots, whether or not they hold any piece.
std::vector<std::string> slot_names_of_group(const OptimizerKind& kind, const Optimizer& optimizer,
                                             size_t g) {
  auto probe = kind.make_empty(optimizer);
  at::Tensor p = at::zeros({1});
  p.mutable_grad() = at::zeros({1});
  probe->param_groups().emplace_back(std::vector<at::Tensor>{p},
                                     optimizer.param_groups()[g].options().clone());
  probe->step();
  std::vector<std::string> names;
  for (const auto& [key, state] : probe->state())
    for (const auto& [name, slot] : kind.get(*state)) names.push_back(name);
  return names;
}

// `params` as one flat tensor of `elements`, if they are consecutive views of one storage.
at::Tensor contiguous_buffer_of(const std::vector<at::Tensor>& params, int64_t elements) {
  const at::Tensor& first = params.front();
  int64_t offset = first.storage_offset();
  for (const auto& p : params) {
    if (!p.is_contiguous() || !p.storage().is_alias_of(first.storage()) ||
        p.storage_offset() != offset)
      return {};
    offset += p.numel();
  }
  if (first.storage().nbytes() < static_cast<size_t>(offset) * first.element_size()) return {};
  return at::empty({0}, first.options())
      .set_(first.storage(), first.storage_offset(), {elements}, {1});
}

bool lists(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class ShardedStep : public OptimizerStepPlan {
 public:
  ShardedStep(const StepPlanInputs& inputs, std::shared_ptr<ShardingState> state)
      : inputs_(inputs), state_(std::move(state)) {}

  PackLanded step_by_packs(int /*replica*/, Optimizer& optimizer,
                           const GradientReducer& reducer) override {
    // finalize calls it on one thread, packs in order, before it returns.
    return [this, &optimizer, &reducer](size_t pack) {
      if (pack == 0) begin_step(OptimizerWithKind(optimizer), reducer);  // its kind, found once
      step_pack(pack);
    };
  }

  void step(int replica, Optimizer& /*optimizer*/) override {
    // The others wait in sync_buffers' collective until replica 0 has written every chunk.
    if (replica == 0) write_gathered_chunks();
  }

  void gather_slots(Optimizer& optimizer) override;
  void read_slots(Optimizer& optimizer) override;
  SlotShares slot_shares(Optimizer& optimizer, const ParameterShards& shards) override;
  void restore_slot_shares(Optimizer& optimizer, SlotShares shares) override;

 private:
  collective::Communicator& cross() const { return inputs_.group->cross_process(); }
  void begin_step(const OptimizerWithKind& step, const GradientReducer& reducer);
  void build(const OptimizerWithKind& step, const GradientReducer& reducer);
  ShardedPack shard_pack(const Optimizer& optimizer, std::vector<at::Tensor> params, size_t pack,
                         const std::unordered_map<const void*, int>& group) const;
  // Cuts a whole state found in `optimizer` into the pieces' and drops it from `optimizer`.
  void adopt_slots(Optimizer& optimizer);
  void step_pack(size_t pack);
  // The pack's chunk of gradient sums (ShardingState) as the gradients of its pieces; the
  // chunk's buffer goes when dropped.
  void attach_sums(ShardedPack& shard, size_t pack) const;
  void drop_sums(ShardedPack& shard, size_t pack) const;
  void write_gathered_chunks();
  // Waits for the pack's gather and writes what it brought into the parameters.
  void finish_gather(ShardedPack& shard);
  bool holds_slots() const;
  // Gives each chunk optimizer its parameter's share of the slots (none: no state).
  void take_slot_shares(const SlotShares& shares);
  void gather_pack_slots(Optimizer& optimizer, const OptimizerKind& kind, ShardedPack& shard,
                         const std::vector<std::vector<std::string>>& names);

  // A parameter's shape, whole or released (stage 3).
  std::vector<int64_t> sizes_of(const at::Tensor& param) const {
    return shards_ ? shards_->sizes(param) : param.sizes().vec();
  }
  int64_t numel_of(const at::Tensor& param) const {
    return shards_ ? shards_->numel(param) : param.numel();
  }

  StepPlanInputs inputs_;
  std::shared_ptr<ShardingState> state_;
  std::shared_ptr<ParameterShards> shards_;  // stage 3: the parameters' chunks live there
  std::vector<ShardedPack> packs_;           // made at the first step
  const OptimizerKind* kind_ = nullptr;      // of the packs' optimizers, found then
  std::unordered_map<const void*, int> groups_at_build_;  // the optimizer's parameters' groups
  // Slot shares restored before the first step made the chunk optimizers, which take them then.
  std::optional<SlotShares> restored_slots_;
};

ShardedPack ShardedStep::shard_pack(const Optimizer& optimizer, std::vector<at::Tensor> params,
                                    size_t pack,
                                    const std::unordered_map<const void*, int>& group) const {
  ShardedPack shard;
  shard.params = std::move(params);
  for (const auto& p : shard.params) {
    DIST_CHECK_ARG(shards_ || p.is_contiguous(), "sharding: a parameter of shape ", p.sizes(),
                   " is not contiguous, so it cannot be cut into chunks; make it contiguous "
                   "before the strategy places the model");
    shard.offsets.push_back(shard.elements);
    auto it = group.find(p.unsafeGetTensorImpl());
    shard.group.push_back(it == group.end() ? -1 : it->second);
    shard.elements += numel_of(p);
  }
  // Stage 3's packs are one parameter each, whose chunk is the pack's.
  DIST_INTERNAL_ASSERT(!shards_ || shard.params.size() == 1, "a stage-3 pack of ",
                       shard.params.size(), " parameters");
  if (!shards_) shard.flat = contiguous_buffer_of(shard.params, shard.elements);
  std::tie(shard.begin, shard.end) =
      collective::chunk_range(shard.elements, cross().size(), cross().rank());
  for (size_t j = 0; j < shard.params.size(); ++j) {
    const int64_t first = std::max(shard.begin, shard.offsets[j]);
    const int64_t last = std::min(shard.end, shard.offsets[j] + numel_of(shard.params[j]));
    if (first >= last) continue;
    ChunkPiece piece{j, first - shard.offsets[j], first - shard.begin, last - first, {}};
    piece.values =
        shards_ ? shards_->owned(shard.params[j])
                : shard.params[j].detach().view(-1).narrow(0, piece.param_offset, piece.length);
    DIST_INTERNAL_ASSERT(piece.values.numel() == piece.length, "a chunk piece of ",
                         piece.values.numel(), " elements where ", piece.length, " were cut");
    if (shard.group[j] >= 0) {
      if (!shard.optimizer) {
        shard.optimizer = kind_->make_empty(optimizer);
        for (const auto& g : optimizer.param_groups())
          shard.optimizer->param_groups().emplace_back(std::vector<at::Tensor>{},
                                                       g.options().clone());
      }
      shard.optimizer->param_groups()[static_cast<size_t>(shard.group[j])].params().push_back(
          piece.values);
    }
    shard.pieces.push_back(std::move(piece));
  }
  attach_sums(shard, pack);
  return shard;
}

void ShardedStep::attach_sums(ShardedPack& shard, size_t pack) const {
  // A pack no reduce-scatter reached (none of it took part in this step's backward) sums to 0.
  shard.sums = state_->chunk(inputs_.model, pack, shard.elements, shard.params[0].options(),
                             cross().rank(), cross().size(), /*zeroed=*/true);
  for (ChunkPiece& piece : shard.pieces)
    piece.values.mutable_grad() = shard.sums.narrow(0, piece.chunk_offset, piece.length);
}

void ShardedStep::drop_sums(ShardedPack& shard, size_t pack) const {
  for (ChunkPiece& piece : shard.pieces) piece.values.mutable_grad() = at::Tensor();
  shard.sums = at::Tensor();
  state_->drop_chunk(inputs_.model, pack);
}

void ShardedStep::build(const OptimizerWithKind& step, const GradientReducer& reducer) {
  DIST_CHECK_ARG(step.kind != nullptr,
                 "sharding: the strategy keeps the optimizer's slots in chunks, which it can do "
                 "for LibTorch's ",
                 detail::optimizer_kind_names(),
                 ", not for this optimizer (a LossScaleOptimizer or one of your own); use one of "
                 "those, or Sharding::kNone");
  kind_ = step.kind;
  shards_ = state_->parameter_shards(inputs_.model);
  const auto group = optimizer_groups_of(step.optimizer);
  groups_at_build_ = group;
  auto packs = reducer.landing_packs();
  for (size_t k = 0; k < packs.size(); ++k)
    packs_.push_back(shard_pack(step.optimizer, std::move(packs[k]), k, group));
  if (restored_slots_) take_slot_shares(*restored_slots_);
  restored_slots_.reset();
}

void ShardedStep::begin_step(const OptimizerWithKind& step, const GradientReducer& reducer) {
  Optimizer& optimizer = step.optimizer;
  if (packs_.empty()) build(step, reducer);
  // The step changes the chunks: no layer may stay gathered from before it.
  if (shards_) shards_->release_all();
  // The chunk optimizers were cut from the groups of the first step: a parameter added since
  // would silently never be stepped.
  DIST_CHECK_ARG(optimizer_groups_of(optimizer) == groups_at_build_,
                 "sharding: the optimizer's parameter groups changed after the first step (",
                 groups_at_build_.size(), " parameters then, ",
                 optimizer_groups_of(optimizer).size(),
                 " now); the strategy cut their slots into shares at the first step, so give "
                 "the optimizer all its parameters and groups before training");
  DIST_CHECK_ARG(step.kind == kind_, "sharding: the packs' optimizers are ", kind_->name,
                 " (the first step's kind), but this step's optimizer is ",
                 step.kind ? step.kind->name : "of another kind",
                 "; step one optimizer throughout");
  if (!optimizer.state().empty()) adopt_slots(optimizer);
  // Learning rates and the other options may have changed since the last step (a schedule, a
  // restored checkpoint).
  for (auto& shard : packs_) {
    if (!shard.optimizer) continue;
    auto& groups = shard.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      groups[g].set_options(optimizer.param_groups()[g].options().clone());
  }
}

void ShardedStep::adopt_slots(Optimizer& optimizer) {
  auto& whole = optimizer.state();
  for (auto& shard : packs_) {
    for (const ChunkPiece& piece : shard.pieces) {
      if (shard.group[piece.param] < 0) continue;
      const std::string key = detail::state_key_of(piece.values);
      auto it = whole.find(detail::state_key_of(shard.params[piece.param]));
      if (it == whole.end()) {
        shard.optimizer->state().erase(key);
        continue;
      }
      std::map<std::string, at::Tensor> slots;
      for (const auto& [name, t] : kind_->get(*it->second))
        slots[name] = name == "step"
                          ? t.clone()
                          : t.reshape(-1).narrow(0, piece.param_offset, piece.length).clone();
      shard.optimizer->state()[key] = kind_->make(slots);
    }
  }
  whole.clear();
}

void ShardedStep::step_pack(size_t pack) {
  ShardedPack& shard = packs_.at(pack);
  const auto step_optimizer = [&] {
    if (!shard.optimizer) return;
    TimelineSpan span("optimizer", "optimizer");
    span.arg("pack", static_cast<int64_t>(pack));
    shard.optimizer->step();
  };
  // Stage 3 holds a pack's sums from its reduce-scatter to its step only: a forward then holds
  // none, and backward only those of the layers it has passed.
  if (shards_) {
    attach_sums(shard, pack);
    try {
      step_optimizer();
    } catch (...) {
      drop_sums(shard, pack);  // a later step must not find these sums as a pack's zeros
      throw;
    }
    drop_sums(shard, pack);
    return;  // stepped in place in the chunk: the next forward gathers it
  }
  step_optimizer();
  // One gather in flight at a time: each holds a pack's worth of memory until it is written.
  if (pack > 0) finish_gather(packs_[pack - 1]);
  if (shard.flat.defined()) {
    shard.outgoing = shard.flat.narrow(0, shard.begin, shard.end - shard.begin);
    shard.gather = cross().all_gather_into(shard.outgoing, shard.flat);
    return;
  }
  shard.outgoing = at::empty({shard.end - shard.begin}, shard.params[0].options());
  for (const ChunkPiece& piece : shard.pieces)
    shard.outgoing.narrow(0, piece.chunk_offset, piece.length).copy_(piece.values);
  shard.gathered = at::Tensor();
  shard.gather = cross().all_gather(shard.outgoing, &shard.gathered);
}

void ShardedStep::write_gathered_chunks() {
  for (auto& shard : packs_) finish_gather(shard);
}

void ShardedStep::finish_gather(ShardedPack& shard) {
  if (!shard.gather) return;
  at::NoGradGuard no_grad;
  shard.gather->wait();
  for (size_t j = 0; j < shard.params.size() && !shard.flat.defined(); ++j)
    shard.params[j].detach().view(-1).copy_(
        shard.gathered.narrow(0, shard.offsets[j], shard.params[j].numel()));
  shard.gather.reset();
  shard.gathered.reset();
  shard.outgoing.reset();
}

void ShardedStep::restore_slot_shares(Optimizer& optimizer, SlotShares shares) {
  optimizer.state().clear();  // whatever it held is no longer the current state
  if (packs_.empty()) {
    restored_slots_ = std::move(shares);
    return;
  }
  take_slot_shares(shares);
}

void ShardedStep::take_slot_shares(const SlotShares& shares) {
  for (auto& shard : packs_) {
    for (const ChunkPiece& piece : shard.pieces) {
      if (shard.group[piece.param] < 0) continue;
      const std::string key = detail::state_key_of(piece.values);
      auto it = shares.find(shard.params[piece.param].unsafeGetTensorImpl());
      if (it == shares.end()) {
        shard.optimizer->state().erase(key);
        continue;
      }
      // Stage 3's packs are one parameter each, whose piece is this worker's share.
      shard.optimizer->state()[key] = kind_->make(it->second);
    }
  }
}

bool ShardedStep::holds_slots() const {
  if (restored_slots_ && !restored_slots_->empty()) return true;
  for (const auto& shard : packs_)
    if (shard.optimizer && !shard.optimizer->state().empty()) return true;
  return false;
}

void ShardedStep::gather_slots(Optimizer& optimizer) {
  // Before the first step nothing is sharded, on any worker; a state already in the optimizer
  // (restored below stage 3, or gathered, and no step since) is the current one, on every
  // worker.
  DIST_CHECK_ARG(!restored_slots_ || restored_slots_->empty() || !optimizer.state().empty(),
                 "sharding 'parameters': the optimizer's slots were restored in shares, which the "
                 "first step hands to the optimizers of the chunks; gather them after a step (a "
                 "checkpoint needs no gathering: every worker writes its piece)");
  if (packs_.empty() || !optimizer.state().empty()) return;
  const OptimizerKind& kind = detail::listed_kind(OptimizerWithKind(optimizer));
  std::vector<std::vector<std::string>> names;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g)
    names.push_back(slot_names_of_group(kind, optimizer, g));
  for (auto& shard : packs_) gather_pack_slots(optimizer, kind, shard, names);
}

// Every parameter of the pack that has state on some worker gets it whole in `optimizer`.
void ShardedStep::gather_pack_slots(Optimizer& optimizer, const OptimizerKind& kind,
                                    ShardedPack& shard,
                                    const std::vector<std::vector<std::string>>& names) {
  // Per parameter: whether some worker holds state for it, and its step counter.
  at::Tensor held = at::zeros({2, static_cast<int64_t>(shard.params.size())}, at::kLong);
  auto marks = held.accessor<int64_t, 2>();
  std::vector<std::map<std::string, at::Tensor>> pieces(shard.pieces.size());
  for (size_t i = 0; i < shard.pieces.size() && shard.optimizer; ++i) {
    const ChunkPiece& piece = shard.pieces[i];
    auto it = shard.optimizer->state().find(detail::state_key_of(piece.values));
    if (it == shard.optimizer->state().end()) continue;
    pieces[i] = kind_->get(*it->second);
    marks[0][static_cast<int64_t>(piece.param)] = 1;
    if (auto step = pieces[i].find("step"); step != pieces[i].end())
      marks[1][static_cast<int64_t>(piece.param)] = step->second.item<int64_t>();
  }
  std::vector<at::Tensor> reduced{held};
  cross().all_reduce(reduced, ReduceOp::kMax)->wait();
  marks = held.accessor<int64_t, 2>();
  auto stateful = [&](size_t j) {
    return shard.group[j] >= 0 && marks[0][static_cast<int64_t>(j)];
  };
  std::vector<std::map<std::string, at::Tensor>> slots(shard.params.size());
  std::set<std::string> every_name;
  for (const auto& group : names) every_name.insert(group.begin(), group.end());
  every_name.erase("step");
  for (const std::string& name : every_name) {
    at::Tensor outgoing = at::zeros({shard.end - shard.begin}, shard.params[0].options());
    for (size_t i = 0; i < shard.pieces.size(); ++i)
      if (auto it = pieces[i].find(name); it != pieces[i].end())
        outgoing.narrow(0, shard.pieces[i].chunk_offset, shard.pieces[i].length).copy_(it->second);
    at::Tensor whole;
    cross().all_gather(outgoing, &whole)->wait();
    for (size_t j = 0; j < shard.params.size(); ++j)
      if (stateful(j) && lists(names[static_cast<size_t>(shard.group[j])], name))
        slots[j][name] = whole.narrow(0, shard.offsets[j], numel_of(shard.params[j]))
                             .view(sizes_of(shard.params[j]))
                             .clone();
  }
  for (size_t j = 0; j < shard.params.size(); ++j) {
    if (!stateful(j)) continue;
    if (lists(names[static_cast<size_t>(shard.group[j])], "step"))
      slots[j]["step"] = at::scalar_tensor(marks[1][static_cast<int64_t>(j)], at::kLong);
    optimizer.state()[detail::state_key_of(shard.params[j])] = kind.make(slots[j]);
  }
}

SlotShares ShardedStep::slot_shares(Optimizer& optimizer, const ParameterShards& shards) {
  // Restored in shares, no step since, and no whole state given to the optimizer after it.
  if (restored_slots_ && optimizer.state().empty()) return *restored_slots_;
  SlotShares shares;
  if (packs_.empty() || !optimizer.state().empty()) {
    // The state is whole in `optimizer` (gathered, or restored below stage 3 or given by the
    // user, no step since) or there is none.
    const OptimizerKind* kind =
        optimizer.state().empty() ? nullptr : &detail::listed_kind(OptimizerWithKind(optimizer));
    for (const auto& group : optimizer.param_groups()) {
      for (const auto& p : group.params()) {
        auto it = optimizer.state().find(detail::state_key_of(p));
        if (it == optimizer.state().end()) continue;
        const int64_t begin = shards.begin(p), length = shards.owned(p).numel();
        auto& share = shares[p.unsafeGetTensorImpl()];
        for (const auto& [name, t] : kind->get(*it->second))
          share[name] = name == "step" ? t : t.reshape(-1).narrow(0, begin, length);
      }
    }
    return shares;
  }
  // Stage 3's packs are one parameter each, and its piece is this worker's range of it.
  for (auto& shard : packs_) {
    for (const ChunkPiece& piece : shard.pieces) {
      if (shard.group[piece.param] < 0) continue;
      auto it = shard.optimizer->state().find(detail::state_key_of(piece.values));
      if (it == shard.optimizer->state().end()) continue;
      shares[shard.params[piece.param].unsafeGetTensorImpl()] = kind_->get(*it->second);
    }
  }
  return shares;
}

void ShardedStep::read_slots(Optimizer& optimizer) {
  if (!optimizer.state().empty() || !holds_slots()) return;
  if (inputs_.group->num_processes() == 1) {
    gather_slots(optimizer);  // a collective of one
    return;
  }
  throw InvalidArgument(detail::concat(
      "Checkpoint: the optimizer's slots are sharded between the ", inputs_.group->num_processes(),
      " workers and were not gathered since the last step; call "
      "Checkpoint::gather_worker_states() on every worker before the chief writes"));
}

}  // namespace

MakeStepPlan sharded_step_plan(std::shared_ptr<ShardingState> state) {
  return [state](const StepPlanInputs& inputs) {
    return std::make_unique<ShardedStep>(inputs, state);
  };
}

}  // namespace dist
