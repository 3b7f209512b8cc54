// A sequence loss averaged over the non-padding tokens of the GLOBAL batch, under every strategy.
//
// Why the token count must be global. A language model's loss is the mean over the step's real
// (non-padding) tokens. Each replica holds a share of the padded batch, with its own number of
// real tokens; the replicas' gradients are SUMMED. For that sum to equal one device's gradient,
// each replica must divide the sum of its own token losses by the token count of the GLOBAL
// batch (every replica, every worker):
//
//   replica 0: 3 real tokens, losses summing to 3  ->  3 / 10 = 0.3
//   replica 1: 7 real tokens, losses summing to 21 -> 21 / 10 = 2.1    sum 2.4 = 24 / 10
//
// Each replica taking its own mean instead (3/3 = 1 and 21/7 = 3, averaged: 2.0) weights a
// token of a short replica batch more than one of a long batch: with uneven padding the job
// trains a different model than one device would.
// compute_average_loss (dist/train/loss.h) divides by the global number of EXAMPLES, known from
// the distributed dataset; the number of tokens is not, since it depends on each example.
//
// The rule, under every strategy: a replica learns the global token count by an all-reduce
// (SUM) of its local count inside strategy.run(). MirroredStrategy and CentralStorageStrategy
// reduce across the process's replica threads, MultiWorkerMirroredStrategy across every
// replica of every worker (so the count is the same on all of them); OneDeviceStrategy, a
// group of one replica, and code outside strategy.run() use the local count, which then is the
// whole batch. Under ParameterServerStrategy each worker's step is its own (asynchronous)
// update and is averaged over its own tokens, as one device would average that batch. The
// all-reduce is a collective: every replica of the group must call the loss (or
// global_token_count) at the same point of each step, also a replica whose share is empty (its
// count, 0, still takes part). One scalar a step: it costs a round trip, not bandwidth.
// A caller that knows the count already (it counted the global batch before splitting it) passes
// it and no collective runs.
//
// Thread safety: SequenceCrossentropy is immutable and may be shared by replica threads.
#pragma once

#include <cstdint>

#include <torch/types.h>

namespace dist {

// The number of true entries of `mask` (a bool tensor, or numbers where non-zero counts) summed
// over every replica of the current sync group: an all-reduce inside a multi-replica
// strategy.run() (see the top of this file), the local count elsewhere.
int64_t global_token_count(const torch::Tensor& mask);

// sum(per_token_loss * mask) / global_token_count: the loss a replica backpropagates so that
// the replicas' summed gradients are one device's gradient of the mean token loss over the
// global batch. per_token_loss and mask have the same shape (e.g. [batch, time]); mask is bool
// or 0/1 numbers. global_token_count = -1 (the default) computes it with global_token_count
// (an all-reduce inside a multi-replica run); a count of 0 gives 0 (still in the autograd
// graph). Throws InvalidArgument on undefined tensors, mismatched shapes, or a count < -1.
torch::Tensor compute_average_token_loss(const torch::Tensor& per_token_loss,
                                         const torch::Tensor& mask,
                                         int64_t global_token_count = -1);

// Cross-entropy of next-token logits against token ids, for sequences padded to one length:
// logits [batch, time, vocabulary] (floating; unnormalized scores), targets [batch, time]
// (integer ids in [0, vocabulary) wherever the token is real). Which tokens are padding: the
// `mask` argument (true / non-zero for real tokens) when given, else targets == padding_id
// when a padding id was given, else none.
class SequenceCrossentropy {
 public:
  static constexpr int64_t kNoPaddingId = -1;

  // padding_id: the target id that marks padding (any value; it need not be a vocabulary id),
  // or kNoPaddingId to take padding only from a mask.
  explicit SequenceCrossentropy(int64_t padding_id = kNoPaddingId);

  // The replica's share of the global mean token loss, as compute_average_token_loss (pass
  // global_token_count when it is known, else it is all-reduced). A scalar.
  torch::Tensor operator()(const torch::Tensor& targets, const torch::Tensor& logits,
                           const torch::Tensor& mask = {}, int64_t global_token_count = -1) const;

  // Each token's loss, [batch, time] in the logits' dtype, exactly 0 at padding (whatever
  // the padded target id is). No collective.
  torch::Tensor per_token(const torch::Tensor& targets, const torch::Tensor& logits,
                          const torch::Tensor& mask = {}) const;

  // Which tokens count: a bool [batch, time] tensor (the mask given, else targets !=
  // padding_id, else all true). Throws InvalidArgument when the mask's shape is not the
  // targets'.
  torch::Tensor token_mask(const torch::Tensor& targets, const torch::Tensor& mask = {}) const;

  int64_t padding_id() const { return padding_id_; }

 private:
  int64_t padding_id_;
};

}  // namespace dist
