// GradientReduction: how a mirrored strategy reduces its models' gradients, chosen once when
// the strategy is made.
//
//   inline      every replica reduces the packs in apply_gradients (in-process strategies, and
//               workers whose collectives finish inside the call: shared memory);
//   overlapped  each pack goes out as soon as backward has produced it (OverlappedReducer; the
//               multi-worker default), through a PackExchange that compression and sharding
//               replace.
//
// It makes each model's GradientReducer and keeps the live ones, so that the strategy reaches
// them at the two points of a step where they must act: before a collective that reaches the
// other processes (complete_steps: the packs still open go out first, so that collective
// follows them on every process) and after run() (settle).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "distribute/reduction/gradient_reducer.h"

namespace dist {
namespace collective {
class Communicator;
class HierarchicalGroup;
}  // namespace collective
class StrategyExtended;

class GradientReduction {
 public:
  virtual ~GradientReduction() = default;
  // A reducer for one model: `params` [replica][parameter], `names` per parameter (for errors),
  // `model` which of the strategy's models it is (GradientPack::model).
  std::shared_ptr<GradientReducer> make_reducer(std::vector<std::vector<at::Tensor>> params,
                                                std::vector<std::string> names, int model);
  // Every live reducer's packs still open go out now (nothing for the inline reduction).
  virtual void complete_steps() const {}
  // A run() ended: every live reducer forgets a step that did not reach apply_gradients.
  void settle();

 protected:
  virtual std::shared_ptr<GradientReducer> make(std::vector<std::vector<at::Tensor>> params,
                                                std::vector<std::string> names, int model) = 0;

  mutable std::mutex mu_;
  std::vector<std::weak_ptr<GradientReducer>> reducers_;
};

// Through `members`, one communicator per local replica (alive as long as the reduction), in
// packs of about `bytes_per_pack`.
std::unique_ptr<GradientReduction> make_inline_reduction(
    std::vector<collective::Communicator*> members, int64_t bytes_per_pack);
// Installs itself as `group`'s step before each cross-process stage; its hooks act only inside
// run() of `owner`. `group` must outlive it.
std::unique_ptr<GradientReduction> make_overlapped_reduction(collective::HierarchicalGroup* group,
                                                             const StrategyExtended* owner,
                                                             int64_t bytes_per_pack,
                                                             PackExchange exchange = {});

}  // namespace dist
