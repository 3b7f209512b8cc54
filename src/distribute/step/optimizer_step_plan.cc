// The three optimizer step plans (optimizer_step_plan.h).
#include "distribute/step/optimizer_step_plan.h"

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>

#include "collective/hierarchical_communicator.h"
#include "core/optimizer_kinds.h"
#include "dist/core/error.h"
#include "dist/core/timeline.h"
#include "distribute/step/optimizer_slots.h"

namespace dist {
namespace {

// Replica 0 steps alone: in blocks, a share per intra-op thread, where the optimizer's kind
// allows (optimizer_shards.h).
class WholeStep : public OptimizerStepPlan {
 public:
  explicit WholeStep(const StepPlanInputs&) {}
  void step(int replica, torch::optim::Optimizer& optimizer) override {
    if (replica == 0) blocks_.step_alone(optimizer);
  }

 private:
  OptimizerShards blocks_;
};

// The local replicas split the step: planned by one thread after every replica's reduction has
// finished (so replica 0's gradients are final), while the others wait; then each steps its
// share. Each replica steps with its own share of the cores: changing the thread count per
// step costs more than it saves (at::set_num_threads rebuilds thread pools). With one replica,
// the step by packs.
class ReplicaSplit : public OptimizerStepPlan {
 public:
  explicit ReplicaSplit(const StepPlanInputs& inputs) : inputs_(inputs) {}

  PackLanded step_by_packs(int /*replica*/, torch::optim::Optimizer& optimizer,
                           const GradientReducer& reducer) override {
    stepped_by_packs_ = false;
    if (replicas() != 1) return {};
    auto packs = reducer.landing_packs();
    // The cheap checks first: a model of one pack (the CNN) asks nothing more, every step.
    if (packs.size() < 2) return {};
    const detail::OptimizerWithKind step(optimizer);  // for the whole walk of this step
    if (!may_step_by_packs(step)) return {};
    // finalize calls it on this thread, packs in order, before it returns.
    return [this, step, packs = std::move(packs)](size_t pack) {
      if (pack == 0) by_packs_.plan_sets(step, packs);
      if (!by_packs_.planned()) return;
      by_packs_.step(static_cast<int>(pack));
      stepped_by_packs_ = pack + 1 == packs.size();
    };
  }

  void step(int replica, torch::optim::Optimizer& optimizer) override {
    if (stepped_by_packs_) return;  // one replica: nobody waits at the barrier below
    auto& local = inputs_.group->local();
    local.barrier(replica, "apply_gradients (optimizer step)",
                  [&] { plan(detail::OptimizerWithKind(optimizer)); });
    if (shards_.planned()) {
      shards_.step(first_share() + replica);
    } else if (replica == 0) {
      TimelineSpan span("optimizer", "optimizer");
      optimizer.step();
    }
    after_shares(replica);
  }
  const OptimizerShards* last_split() const override {
    if (stepped_by_packs_) return &by_packs_;
    return shards_.planned() ? &shards_ : nullptr;
  }

 protected:
  int replicas() { return inputs_.group->local().size(); }
  // One thread, while the local replicas wait: plans shards_.
  virtual void plan(const detail::OptimizerWithKind& step) { shards_.plan(step, replicas()); }
  // This process's first share of the planned step.
  virtual int first_share() { return 0; }
  // Every replica, after its share: the local barrier that follows (sync_buffers) makes the
  // shares visible in process.
  virtual void after_shares(int replica) {}
  // Whether a step of one replica may go by packs (the host split first asks the workers).
  virtual bool may_step_by_packs(const detail::OptimizerWithKind& /*step*/) { return true; }

  StepPlanInputs inputs_;
  OptimizerShards shards_;
  OptimizerShards by_packs_;
  bool stepped_by_packs_ = false;  // this step's packs were all stepped as they landed
};

// What one step updates, as HostSharedVariables values: every parameter (held by each
// replica's copy) and every slot of its optimizer state but the step counter.
struct StepValues {
  std::vector<HostSharedVariables::Holders> values;
  // The optimizer states, by key, as slots whose tensors are handles in `values`: the state
  // the optimizer reads holds other handles (the kind's get detaches), so after the slots move,
  // each state is made again from these.
  std::vector<std::pair<std::string, std::map<std::string, at::Tensor>>> states;

  StepValues(std::vector<HostSharedVariables::Holders> parameters,
             const detail::OptimizerWithKind& step) {
    const auto& state = step.optimizer.state();
    for (auto& holders : parameters) {
      const std::string key = detail::state_key_of(holders[0]);
      values.push_back(std::move(holders));
      auto it = state.find(key);
      if (it == state.end()) continue;
      auto slots = detail::listed_kind(step).get(*it->second);
      for (const auto& [name, slot] : slots)
        if (name != "step") values.push_back({slot});
      states.emplace_back(key, std::move(slots));
    }
  }

  // After share() or unshare(): the optimizer's states read the slots where they are now.
  void restate(const detail::OptimizerWithKind& step) const {
    // An optimizer whose state is read here is of a kind the table lists (OptimizerShards splits
    // no other); listed_kind refuses any other by name.
    const detail::OptimizerKind& kind = detail::listed_kind(step);
    for (const auto& [key, slots] : states) step.optimizer.state()[key] = kind.make(slots);
  }
};

// The workers of one host split the step over one shared copy (host_shared_variables.h says
// why); every worker's share is written before any worker reads the variables again.
class HostSplit : public ReplicaSplit {
 public:
  using ReplicaSplit::ReplicaSplit;

  void prepare_to_write() override {
    // The next step finds the parameters outside the shared copy and shares them again, from
    // worker 0's values.
    if (host_.active()) host_.unshare(inputs_.parameter_holders());
  }

 protected:
  void plan(const detail::OptimizerWithKind& step) override {
    shared_with_workers_ = !refused_ && plan_with_workers(step);
    if (!shared_with_workers_) ReplicaSplit::plan(step);
  }
  int first_share() override {
    return shared_with_workers_ ? inputs_.group->process_rank() * replicas() : 0;
  }
  // When step() would take no collective: once the workers have found they cannot share (a
  // decision they all took together), or while a step is too small to split between them and
  // they share nothing yet (plan_with_workers then returns before its vote).
  bool may_step_by_packs(const detail::OptimizerWithKind& step) override {
    return refused_ || (!host_.active() && !OptimizerShards::splittable(
                                               step, inputs_.group->num_processes() * replicas()));
  }
  void after_shares(int replica) override {
    if (!shared_with_workers_) return;
    inputs_.group->local().barrier(replica, "apply_gradients (shared update)", [&] {
      inputs_.group->cross_process().barrier()->wait();
      host_.remember_versions(inputs_.parameter_holders());
    });
  }

 private:
  bool plan_with_workers(const detail::OptimizerWithKind& step);
  void check_votes(const at::Tensor& votes, int workers) const;

  HostSharedVariables host_;
  bool refused_ = false;              // the workers cannot share memory: never ask again
  bool shared_with_workers_ = false;  // this step's shares span every worker
};

bool HostSplit::plan_with_workers(const detail::OptimizerWithKind& optimizer) {
  const int workers = inputs_.group->num_processes();
  const int shards = workers * replicas();
  const bool splittable = OptimizerShards::splittable(optimizer, shards);
  // Every worker decides alike from equal state; the vote turns a difference into an error
  // instead of workers updating one copy in different ways. Small models never vote.
  if (!splittable && !host_.active()) return false;
  StepValues step(inputs_.parameter_holders(), optimizer);
  auto& cross = inputs_.group->cross_process();
  const bool holds = host_.holds(step.values);
  const bool written = holds && host_.written_outside_steps(inputs_.parameter_holders());
  std::vector<at::Tensor> votes{
      at::tensor({int64_t{splittable}, int64_t{splittable && holds}, int64_t{written}})};
  cross.all_reduce(votes, ReduceOp::kSum)->wait();
  check_votes(votes[0], workers);
  const int64_t split = votes[0][0].item<int64_t>(), held = votes[0][1].item<int64_t>();
  if (split > 0 && (held == workers || host_.share(step.values, cross))) {
    if (held < workers) step.restate(optimizer);
    const bool planned = shards_.plan(optimizer, shards);
    DIST_INTERNAL_ASSERT(planned, "a splittable step did not plan");
    return true;
  }
  // Not splittable, or no room for a new shared copy (after a restore, say): each worker takes
  // its own; the second is for good.
  host_.unshare(step.values);
  step.restate(optimizer);
  if (split > 0) refused_ = true;
  return false;
}

void HostSplit::check_votes(const at::Tensor& votes, int workers) const {
  const int64_t split = votes[0].item<int64_t>();
  DIST_CHECK(split == 0 || split == workers, CollectiveError, "apply_gradients: ", split, " of ",
             workers,
             " workers can split the optimizer step, the others cannot; every worker must "
             "build the same model and optimizer");
  DIST_CHECK(votes[2].item<int64_t>() == 0, CollectiveError,
             "apply_gradients: the model's parameters were changed in place outside "
             "apply_gradients while the workers of this host share one copy of them, so "
             "every worker's change landed on that one copy; change them with "
             "Model::set_weights or Checkpoint::read (which give each worker its own copy "
             "first), or set CommunicationOptions::share_variables_on_host = false");
}

template <typename Plan>
MakeStepPlan maker() {
  return [](const StepPlanInputs& inputs) { return std::make_unique<Plan>(inputs); };
}

}  // namespace

MakeStepPlan choose_step_plan(bool shard_optimizer_step, bool share_variables_on_host, int replicas,
                              int workers) {
  if (!shard_optimizer_step) return maker<WholeStep>();
  if (share_variables_on_host && workers > 1) return maker<HostSplit>();
  if (replicas == 1 && workers == 1) return maker<WholeStep>();
  return maker<ReplicaSplit>();
}

}  // namespace dist
