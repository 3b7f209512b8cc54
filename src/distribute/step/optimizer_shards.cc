#include "distribute/step/optimizer_shards.h"

#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>

#include <map>
#include <string>

#include "core/intra_op_parallel.h"
#include "dist/core/error.h"
#include "dist/core/timeline.h"
#include "distribute/step/optimizer_slots.h"

namespace dist {
namespace {

using detail::OptimizerKind;
using detail::OptimizerWithKind;
using torch::optim::Optimizer;

constexpr const char* kStep = "step";

struct Parameter {
  at::Tensor param;
  at::Tensor grad;
  size_t group = 0;
  int64_t start = 0;  // in the flat range of every parameter with a gradient
  std::string key;
  std::map<std::string, at::Tensor> slots;  // empty: SGD without momentum keeps none
};

bool flat_viewable(const at::Tensor& t) { return t.layout() == at::kStrided && t.is_contiguous(); }

// SGD without momentum is the one optimizer here that keeps no state; every other one makes its
// slots on a parameter's first step, which must then run whole.
bool keeps_no_state(const torch::optim::OptimizerOptions& options) {
  const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options);
  return sgd != nullptr && sgd->momentum() == 0;
}

// The parameters the next step updates, in the optimizer's order, or false when it must run
// whole. Cheap: no slot is looked at yet.
bool collect(const Optimizer& optimizer, std::vector<Parameter>& out, int64_t& total) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      if (!flat_viewable(p) || !flat_viewable(grad) || grad.sizes() != p.sizes()) return false;
      out.push_back({p.detach(), grad.detach(), g, total, detail::state_key_of(p), {}});
      total += p.numel();
    }
  }
  return true;
}

// Each parameter's slots, or false when one is missing (its first step makes it) or cannot be
// viewed flat.
bool attach_slots(const Optimizer& optimizer, const OptimizerKind& kind,
                  std::vector<Parameter>& params) {
  const auto& state = optimizer.state();
  for (Parameter& p : params) {
    auto it = state.find(p.key);
    if (it == state.end()) {
      if (!keeps_no_state(optimizer.param_groups()[p.group].options())) return false;
      continue;
    }
    p.slots = kind.get(*it->second);
    for (const auto& [name, t] : p.slots)
      if (name != kStep && !(flat_viewable(t) && t.sizes() == p.param.sizes())) return false;
  }
  return true;
}

// Offsets in the flat range where share k ends, balanced by elements; a cut inside a
// parameter falls on a multiple of kAlignment of that parameter's elements.
std::vector<int64_t> cut_points(const std::vector<Parameter>& params, int64_t total,
                                int num_shards) {
  std::vector<int64_t> cuts(static_cast<size_t>(num_shards) + 1, total);
  cuts[0] = 0;
  size_t p = 0;
  for (int k = 1; k < num_shards; ++k) {
    const int64_t target = total * k / num_shards;
    while (params[p].start + params[p].param.numel() <= target) ++p;
    const int64_t local = target - params[p].start;
    cuts[static_cast<size_t>(k)] =
        params[p].start + local / OptimizerShards::kAlignment * OptimizerShards::kAlignment;
  }
  return cuts;
}

at::Tensor piece_of(const at::Tensor& whole, int64_t offset, int64_t length) {
  return whole.view(-1).narrow(0, offset, length);
}

// A share: ranges of parameters, (parameter, first element, elements).
struct Piece {
  size_t param;
  int64_t offset;
  int64_t length;
};
using Share = std::vector<Piece>;

std::vector<Share> shares_between(const std::vector<Parameter>& params,
                                  const std::vector<int64_t>& cuts) {
  std::vector<Share> shares(cuts.size() - 1);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t begin = std::max(cuts[k], params[i].start);
      const int64_t end = std::min(cuts[k + 1], params[i].start + params[i].param.numel());
      if (begin < end) shares[k].push_back({i, begin - params[i].start, end - begin});
    }
  }
  return shares;
}

// One share per set of whole parameters; false when a parameter the step updates is in no set.
bool shares_of_sets(const std::vector<Parameter>& params,
                    const std::vector<std::vector<at::Tensor>>& sets, std::vector<Share>& shares) {
  std::map<std::string, size_t> set_of;
  for (size_t k = 0; k < sets.size(); ++k)
    for (const auto& t : sets[k]) set_of[detail::state_key_of(t)] = k;
  shares.assign(sets.size(), {});
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = set_of.find(params[i].key);
    if (it == set_of.end()) return false;
    shares[it->second].push_back({i, 0, params[i].param.numel()});
  }
  return true;
}

// `shares` with every piece cut into blocks of at most `block` elements (a multiple of
// kAlignment), each block a parameter of the share's optimizer: the optimizer then runs its
// whole chain of elementwise operations over one block while the block's parameter, gradient
// and slots are still in cache, where a parameter of 16M elements would stream them from memory
// once per operation (Adam's 8).
std::vector<Share> in_blocks(std::vector<Share> shares, int64_t block) {
  DIST_INTERNAL_ASSERT(block > 0 && block % OptimizerShards::kAlignment == 0, "blocks of ", block,
                       " elements");
  for (Share& share : shares) {
    Share blocks;
    for (const Piece& piece : share)
      for (int64_t at = 0; at < piece.length; at += block)
        blocks.push_back({piece.param, piece.offset + at, std::min(block, piece.length - at)});
    share = std::move(blocks);
  }
  return shares;
}

// An empty optimizer of the same kind and the parameters' slots; false when the step must run
// whole.
bool prepare(const OptimizerWithKind& step, std::vector<Parameter>& params,
             std::unique_ptr<Optimizer>& probe) {
  if (step.kind == nullptr) return false;  // not a kind whose state we know how to cut
  probe = step.kind->make_empty(step.optimizer);
  return attach_slots(step.optimizer, *step.kind, params);
}

bool worth_planning(const Optimizer& optimizer, int num_shards, int64_t min_elements_per_shard,
                    int64_t block_elements, std::vector<Parameter>& params) {
  if (num_shards < 1) return false;
  int64_t total = 0;
  // Below the minimum (a small model, every step) this is all the work done.
  if (!collect(optimizer, params, total) || params.empty()) return false;
  // One share is worth its views only for its blocks.
  if (num_shards == 1) return total > block_elements;
  return total >= min_elements_per_shard * num_shards;
}

// The optimizers of `shares`, over views of their pieces: shards[k] and elements[k] for share k.
// `step.kind` is known (prepare returned true).
void build(const OptimizerWithKind& step, std::vector<Parameter>& params,
           std::unique_ptr<Optimizer> probe, const std::vector<Share>& shares,
           std::vector<std::unique_ptr<Optimizer>>& shards, std::vector<int64_t>& elements) {
  Optimizer& optimizer = step.optimizer;
  const OptimizerKind& kind = *step.kind;
  for (size_t k = 0; k < shares.size(); ++k) {
    std::unique_ptr<Optimizer> shard = k == 0 ? std::move(probe) : kind.make_empty(optimizer);
    for (const auto& group : optimizer.param_groups())
      shard->param_groups().emplace_back(std::vector<at::Tensor>{}, group.options().clone());
    int64_t count = 0;
    for (const Piece& piece : shares[k]) {
      const Parameter& p = params[piece.param];
      at::Tensor view = piece_of(p.param, piece.offset, piece.length);
      view.mutable_grad() = piece_of(p.grad, piece.offset, piece.length);
      shard->param_groups()[p.group].params().push_back(view);
      if (!p.slots.empty()) {
        std::map<std::string, at::Tensor> slots;
        for (const auto& [name, t] : p.slots)
          slots[name] = name == kStep ? t : piece_of(t, piece.offset, piece.length);
        shard->state()[detail::state_key_of(view)] = kind.make(slots);
      }
      count += piece.length;
    }
    shards.push_back(std::move(shard));
    elements.push_back(count);
  }

  // Every piece's state starts from the counter the whole parameter has now and advances it by
  // one, as a whole step would; the whole state takes that value here, so the shards' steps
  // write only to the tensors their pieces view.
  auto& state = optimizer.state();
  for (Parameter& p : params) {
    auto counter = p.slots.find(kStep);
    if (counter == p.slots.end()) continue;
    counter->second = at::scalar_tensor(counter->second.item<int64_t>() + 1, at::kLong);
    state[p.key] = kind.make(p.slots);
  }
}

}  // namespace

bool OptimizerShards::splittable(const OptimizerWithKind& step, int num_shards,
                                 int64_t min_elements_per_shard) {
  std::vector<Parameter> params;
  std::unique_ptr<Optimizer> probe;
  return num_shards >= 2 &&
         worth_planning(step.optimizer, num_shards, min_elements_per_shard, kBlockElements,
                        params) &&
         prepare(step, params, probe);
}

bool OptimizerShards::plan(const OptimizerWithKind& step, int num_shards,
                           int64_t min_elements_per_shard, int64_t block_elements) {
  clear();
  std::vector<Parameter> params;
  std::unique_ptr<Optimizer> probe;
  if (!worth_planning(step.optimizer, num_shards, min_elements_per_shard, block_elements, params) ||
      !prepare(step, params, probe))
    return false;
  const int64_t total = params.back().start + params.back().param.numel();
  build(step, params, std::move(probe),
        in_blocks(shares_between(params, cut_points(params, total, num_shards)), block_elements),
        shards_, elements_);
  return true;
}

bool OptimizerShards::plan_sets(const OptimizerWithKind& step,
                                const std::vector<std::vector<at::Tensor>>& sets,
                                int64_t block_elements) {
  clear();
  std::vector<Parameter> params;
  int64_t total = 0;
  std::unique_ptr<Optimizer> probe;
  std::vector<Share> shares;
  if (sets.size() < 2 || !collect(step.optimizer, params, total) || params.empty() ||
      !shares_of_sets(params, sets, shares) || !prepare(step, params, probe))
    return false;
  build(step, params, std::move(probe), in_blocks(std::move(shares), block_elements), shards_,
        elements_);
  return true;
}

void OptimizerShards::clear() {
  shards_.clear();
  elements_.clear();
}

void OptimizerShards::step(int shard) {
  DIST_INTERNAL_ASSERT(shard >= 0 && static_cast<size_t>(shard) < shards_.size(), "step of shard ",
                       shard, " of ", shards_.size());
  TimelineSpan span("optimizer", "optimizer");
  span.arg("share", shard);
  span.arg("elements", elements_.at(static_cast<size_t>(shard)));
  shards_[static_cast<size_t>(shard)]->step();
}

void OptimizerShards::step_all() {
  detail::intra_op_parallel_for(0, shares(), 1, [this](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) step(static_cast<int>(k));
  });
}

void OptimizerShards::step_alone(torch::optim::Optimizer& optimizer) {
  if (plan(detail::OptimizerWithKind(optimizer), at::get_num_threads())) {
    step_all();
    return;
  }
  TimelineSpan span("optimizer", "optimizer");
  optimizer.step();
}

bool OptimizerShards::planned() const { return !shards_.empty(); }

int64_t OptimizerShards::elements(int shard) const {
  return elements_.at(static_cast<size_t>(shard));
}

int64_t OptimizerShards::blocks(int shard) const {
  int64_t count = 0;
  for (const auto& group : shards_.at(static_cast<size_t>(shard))->param_groups())
    count += static_cast<int64_t>(group.params().size());
  return count;
}

}  // namespace dist
