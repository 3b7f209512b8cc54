#include "distribute/optimizer_shards.h"

#include <torch/optim/sgd.h>

#include <map>
#include <string>

#include "dist/core/error.h"
#include "distribute/optimizer_slots.h"

namespace dist {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerParamState;

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
bool attach_slots(const Optimizer& optimizer, std::vector<Parameter>& params) {
  const auto& state = optimizer.state();
  for (Parameter& p : params) {
    auto it = state.find(p.key);
    if (it == state.end()) {
      if (!keeps_no_state(optimizer.param_groups()[p.group].options())) return false;
      continue;
    }
    p.slots = detail::state_slots(optimizer, *it->second);
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

// The parameters of the next step with their slots, an empty optimizer of the same kind, and
// the element count; false when the step must run whole.
bool prepare(const Optimizer& optimizer, int num_shards, int64_t min_elements_per_shard,
             std::vector<Parameter>& params, int64_t& total, std::unique_ptr<Optimizer>& probe) {
  if (num_shards < 2) return false;
  // Below the minimum (a small model, every step) this is all the work done.
  if (!collect(optimizer, params, total) || params.empty() ||
      total < min_elements_per_shard * num_shards)
    return false;
  probe = detail::empty_optimizer_like(optimizer);
  if (!probe) return false;  // not a kind whose state we know how to cut
  return attach_slots(optimizer, params);
}

}  // namespace

bool OptimizerShards::splittable(const Optimizer& optimizer, int num_shards,
                                 int64_t min_elements_per_shard) {
  std::vector<Parameter> params;
  int64_t total = 0;
  std::unique_ptr<Optimizer> probe;
  return prepare(optimizer, num_shards, min_elements_per_shard, params, total, probe);
}

bool OptimizerShards::plan(Optimizer& optimizer, int num_shards, int64_t min_elements_per_shard) {
  shards_.clear();
  elements_.clear();
  std::vector<Parameter> params;
  int64_t total = 0;
  std::unique_ptr<Optimizer> probe;
  if (!prepare(optimizer, num_shards, min_elements_per_shard, params, total, probe)) return false;

  const std::vector<int64_t> cuts = cut_points(params, total, num_shards);
  for (int k = 0; k < num_shards; ++k) {
    std::unique_ptr<Optimizer> shard =
        k == 0 ? std::move(probe) : detail::empty_optimizer_like(optimizer);
    for (const auto& group : optimizer.param_groups())
      shard->param_groups().emplace_back(std::vector<at::Tensor>{}, group.options().clone());
    const int64_t lo = cuts[static_cast<size_t>(k)];
    const int64_t hi = cuts[static_cast<size_t>(k) + 1];
    int64_t elements = 0;
    for (const Parameter& p : params) {
      const int64_t begin = std::max(lo, p.start);
      const int64_t end = std::min(hi, p.start + p.param.numel());
      if (begin >= end) continue;
      const int64_t offset = begin - p.start;
      const int64_t length = end - begin;
      at::Tensor piece = piece_of(p.param, offset, length);
      piece.mutable_grad() = piece_of(p.grad, offset, length);
      shard->param_groups()[p.group].params().push_back(piece);
      if (!p.slots.empty()) {
        std::map<std::string, at::Tensor> slots;
        for (const auto& [name, t] : p.slots)
          slots[name] = name == kStep ? t : piece_of(t, offset, length);
        shard->state()[detail::state_key_of(piece)] = detail::state_of_slots(optimizer, slots);
      }
      elements += length;
    }
    shards_.push_back(std::move(shard));
    elements_.push_back(elements);
  }

  // Every piece's state starts from the counter the whole parameter has now and advances it by
  // one, as a whole step would; the whole state takes that value here, so the shards' steps
  // write only to the tensors their pieces view.
  auto& state = optimizer.state();
  for (Parameter& p : params) {
    auto step = p.slots.find(kStep);
    if (step == p.slots.end()) continue;
    step->second = at::scalar_tensor(step->second.item<int64_t>() + 1, at::kLong);
    state[p.key] = detail::state_of_slots(optimizer, p.slots);
  }
  return true;
}

void OptimizerShards::step(int shard) {
  DIST_INTERNAL_ASSERT(shard >= 0 && static_cast<size_t>(shard) < shards_.size(), "step of shard ",
                       shard, " of ", shards_.size());
  shards_[static_cast<size_t>(shard)]->step();
}

bool OptimizerShards::planned() const { return !shards_.empty(); }

int64_t OptimizerShards::elements(int shard) const {
  return elements_.at(static_cast<size_t>(shard));
}

}  // namespace dist
