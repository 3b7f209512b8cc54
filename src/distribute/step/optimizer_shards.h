// OptimizerShards: one optimizer step split between the replica threads of a process.
//
// Mirrored copies share their parameters' storage, so one optimizer step serves them all. Taken
// by replica 0 alone, that step is the other replicas' idle time: Adam over a 20M-parameter MLP
// is a third of the forward and backward pass. The elementwise optimizers (SGD, Adam, AdamW,
// RMSprop, Adagrad) update each element from that element's parameter, gradient and slots
// only, so the flat range of every element can be cut into contiguous pieces, one share per
// replica, and each replica runs an optimizer of the same type over views of its pieces: the
// same arithmetic on the same elements, bit for bit (tests/distribute/optimizer_shards_test.cc).
//
// Pieces are cut at multiples of kAlignment elements within a parameter, so each piece's
// vectorized loop covers the same elements as the whole parameter's and the scalar remainder
// is the same last few elements.
//
// Protocol (one step): one thread calls plan() while the others wait; if it returns true,
// every shard's thread calls step(shard) at once, then all of them wait for each other before
// the parameters are read again. plan() advances the whole optimizer's step counters itself
// (every piece of a parameter advances its copy of the counter the same way), so step() touches
// nothing but its own pieces. If plan() returns false, the caller takes optimizer.step() whole:
// an optimizer of another kind, slots that its first step has not made yet, tensors that are
// not contiguous, or too few elements to be worth splitting.
//
// plan_sets() cuts by given sets of whole parameters instead: a pack of gradients each, so that
// each share can be stepped, one after another, as soon as its pack's sums have landed while
// later packs are still on their way (the step by packs, optimizer_step_plan.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "core/optimizer_kinds.h"

namespace dist {

class OptimizerShards {
 public:
  static constexpr int64_t kAlignment = 64;
  // Below this many elements per shard the step runs whole: the views and the extra dispatches
  // cost more than they save.
  static constexpr int64_t kMinElementsPerShard = int64_t{1} << 16;

  // Plans `num_shards` shares of the next step of `step.optimizer` over its parameters that
  // have a gradient; its slots are read and the shares' states made through `step.kind`. Not
  // thread-safe: one thread, while no other touches the optimizer.
  bool plan(const detail::OptimizerWithKind& step, int num_shards,
            int64_t min_elements_per_shard = kMinElementsPerShard);

  // Plans one share per set of `sets` (tensors the optimizer holds; share k steps the
  // parameters of sets[k] that have a gradient). False, as plan(), when the step must run
  // whole; also when fewer than two sets, or a parameter the step updates is in no set.
  bool plan_sets(const detail::OptimizerWithKind& step,
                 const std::vector<std::vector<at::Tensor>>& sets);

  // Whether plan() with these arguments would return true (it changes nothing).
  static bool splittable(const detail::OptimizerWithKind& step, int num_shards,
                         int64_t min_elements_per_shard = kMinElementsPerShard);

  // Steps share `shard` of the planned step; safe to call for different shards at once.
  void step(int shard);

  // Whether the last plan() returned true (its shares are ready to step).
  bool planned() const;
  // Elements of share `shard` in the last plan (for tests).
  int64_t elements(int shard) const;
  int shares() const { return static_cast<int>(shards_.size()); }

 private:
  void clear();

  std::vector<std::unique_ptr<torch::optim::Optimizer>> shards_;
  std::vector<int64_t> elements_;
};

}  // namespace dist
