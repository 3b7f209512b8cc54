// OptimizerStepPlan: who takes the one optimizer step that serves every copy of a mirrored
// model.
//
// The replica copies of a model share their parameters' storage, so one optimizer step updates
// them all. The plans:
//   whole step     replica 0 steps alone (one replica, or sharding turned off);
//   replica split  the local replicas each step their share of the elements (OptimizerShards);
//   host split     the worker processes of one host keep the parameters and slots as one copy
//                  in shared memory (HostSharedVariables) and every replica of every worker
//                  steps its share; when the workers cannot share, the replica split;
//   step by packs  one replica per worker, several workers, gradients reduced pack by pack
//                  (OverlappedReducer): each pack's parameters are stepped as soon as its sums
//                  land, while later packs are still on the wire, so the step's arithmetic
//                  (Adam over the 67 MB layer of the 20M-parameter MLP) overlaps the last
//                  pack's transfer instead of following it. Same arithmetic on the same
//                  elements as the whole step (OptimizerShards::plan_sets), bit for bit.
//                  The replica split takes it where it has one replica; the host split
//                  where its step takes no collective (its workers found that they cannot
//                  share, or the model is too small to split between them).
// A strategy picks the plan once, when it is made (choose_step_plan); the plan keeps whatever
// state its protocol needs (a host split remembers that the workers could not share).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "distribute/reduction/gradient_reducer.h"
#include "distribute/step/host_shared_variables.h"
#include "distribute/step/optimizer_shards.h"

namespace dist {
namespace collective {
class HierarchicalGroup;
}
class ParameterShards;

// An optimizer's slots by parameter (its TensorImpl): slot name -> values.
using SlotShares = std::map<const void*, std::map<std::string, at::Tensor>>;

class OptimizerStepPlan {
 public:
  virtual ~OptimizerStepPlan() = default;
  // From every local replica's thread, once the gradients are reduced into replica 0's: returns
  // when this replica's part of the step is done and (for the splits) every other part is
  // visible to it. A collective of the local replicas (and, for a host split, of the workers).
  virtual void step(int replica, torch::optim::Optimizer& optimizer) = 0;
  // Before the reduction's finalize, from every local replica's thread: what finalize calls as
  // each pack of `reducer` lands (gradient_reducer.h), when this step goes by packs; else an
  // empty function. When every pack was stepped as it landed, step() has nothing left to do.
  // An optimizer that is no elementwise kind it knows (LossScaleOptimizer's, which must see
  // every gradient before it steps any) or whose slots its first step has not made yet takes
  // the step whole after every pack has landed.
  virtual PackLanded step_by_packs(int /*replica*/, torch::optim::Optimizer& /*optimizer*/,
                                   const GradientReducer& /*reducer*/) {
    return {};
  }
  // The variables are about to be written outside a step (a restore, set_weights): each worker
  // must then write its own copy, not one that other processes read.
  virtual void prepare_to_write() {}
  // The shares of the last step, when it was split (for tests and benchmarks); else null.
  virtual const OptimizerShards* last_split() const { return nullptr; }
  // A plan that keeps the optimizer's slots itself (a sharded step) puts them whole into
  // `optimizer`, for a checkpoint to write: gather_slots is a collective of every worker
  // (Checkpoint::gather_worker_states), read_slots is what the writer calls (it refuses to
  // write slots that were not gathered since the last step, unless it can gather alone).
  virtual void gather_slots(torch::optim::Optimizer& /*optimizer*/) {}
  virtual void read_slots(torch::optim::Optimizer& /*optimizer*/) {}
  // At stage 3, this worker's ranges (shards.owned()) of the slots of each parameter with state,
  // by the parameter's TensorImpl: slot name -> values (1-D; "step" whole). No collective.
  virtual SlotShares slot_shares(torch::optim::Optimizer& /*optimizer*/,
                                 const ParameterShards& /*shards*/) {
    return {};
  }
  // At stage 3, restores those ranges (a checkpoint read), as slot_shares() gives them; the
  // optimizer keeps no state. No collective.
  virtual void restore_slot_shares(torch::optim::Optimizer& /*optimizer*/, SlotShares /*shares*/) {}
};

// What a plan works with: the strategy's replicas and workers, and the model's parameters with
// the replica copies that hold them (HostSharedVariables values, replica 0's first).
struct StepPlanInputs {
  collective::HierarchicalGroup* group = nullptr;
  std::function<std::vector<HostSharedVariables::Holders>()> parameter_holders;
  int model = 0;  // which of the strategy's models (GradientPack::model of its packs)
};

using MakeStepPlan = std::function<std::unique_ptr<OptimizerStepPlan>(const StepPlanInputs&)>;

// The plan for a strategy of `replicas` per worker and `workers` processes:
// `shard_optimizer_step` (MirroredOptions) allows the splits and the step by packs,
// `share_variables_on_host` (CommunicationOptions) the host split.
MakeStepPlan choose_step_plan(bool shard_optimizer_step, bool share_variables_on_host, int replicas,
                              int workers);

}  // namespace dist
