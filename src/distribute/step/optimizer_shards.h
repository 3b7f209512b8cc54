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
// is the same last few elements. (ATen 1.13's elementwise kernels of these optimizers give the
// same bits in both anyway: Adam's chain over pieces cut at odd offsets, with 1 or 2 threads
// and ATEN_CPU_CAPABILITY default, avx2 or avx512, matched the whole tensor's.)
//
// Each share's pieces are cut again into blocks of at most kBlockElements, each a parameter of
// the share's optimizer, which runs its chain of elementwise operations (Adam's 8) over one
// block after another: a block's parameter, gradient and slots stay in cache between the
// operations, where a whole 16M-element parameter streams them from memory for each. A step of
// one share is planned for its blocks alone.
//
// A thread that steps alone with several intra-op threads (the one replica of OneDevice, or of
// a worker) plans one share per thread and steps them with step_all(), each share on one thread:
// ATen's own parallelism, one parallel region per operation per block, cost more than the
// blocks saved (on a Zen 5, Adam over the 20M-parameter MLP on 2 threads: 31 ms whole, 41 ms
// in blocks of 256K elements, 25 ms in blocks of 2M).
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
  // 1 MB for each of a block's tensors of float (parameter, gradient, Adam's two slots and the
  // temporaries of its operations). On a Zen 5 (1 MB of L2 a core, 32 MB of L3), Adam over the
  // 20M-parameter MLP, each of 2 replicas on one thread stepping its half: 28 ms whole, 14 ms in
  // blocks of 256K elements, 24 ms in blocks of 2M.
  static constexpr int64_t kBlockElements = int64_t{1} << 18;

  // Plans `num_shards` shares of the next step of `step.optimizer` over its parameters that
  // have a gradient; its slots are read and the shares' states made through `step.kind`. Not
  // thread-safe: one thread, while no other touches the optimizer. One share is planned only
  // when its parameters are more than one block.
  bool plan(const detail::OptimizerWithKind& step, int num_shards,
            int64_t min_elements_per_shard = kMinElementsPerShard,
            int64_t block_elements = kBlockElements);

  // Plans one share per set of `sets` (tensors the optimizer holds; share k steps the
  // parameters of sets[k] that have a gradient). False, as plan(), when the step must run
  // whole; also when fewer than two sets, or a parameter the step updates is in no set.
  bool plan_sets(const detail::OptimizerWithKind& step,
                 const std::vector<std::vector<at::Tensor>>& sets,
                 int64_t block_elements = kBlockElements);

  // Whether plan() with these arguments (at least two shares) would return true (it changes
  // nothing).
  static bool splittable(const detail::OptimizerWithKind& step, int num_shards,
                         int64_t min_elements_per_shard = kMinElementsPerShard);

  // Steps share `shard` of the planned step; safe to call for different shards at once.
  void step(int shard);
  // Steps every share, each on one of ATen's intra-op threads of the calling thread (whose
  // operations then run on that thread alone); returns when all are done.
  void step_all();
  // The step of a thread that steps alone (OneDevice's replica, a whole-step plan): planned
  // with a share per intra-op thread of the caller and stepped with step_all() where the
  // optimizer's kind allows, else optimizer.step(). The same bits either way.
  void step_alone(torch::optim::Optimizer& optimizer);

  // Whether the last plan() returned true (its shares are ready to step).
  bool planned() const;
  // Elements of share `shard` in the last plan (for tests).
  int64_t elements(int shard) const;
  // Pieces of parameters (blocks) that share `shard` steps one after another (for tests).
  int64_t blocks(int shard) const;
  int shares() const { return static_cast<int>(shards_.size()); }

 private:
  void clear();

  std::vector<std::unique_ptr<torch::optim::Optimizer>> shards_;
  std::vector<int64_t> elements_;
};

}  // namespace dist
