// A sequence loss averaged over the non-padding tokens of the GLOBAL batch, under every
// strategy: each replica divides the sum of its token losses by the token count of every
// replica of every worker, so the summed gradients equal one device's whatever the padding.
// Inside strategy.run() the count is one all-reduce (SUM) of a scalar, a collective: every
// replica calls the loss (or global_token_count) at the same point of each step, an empty one
// too; a caller that knows the global count passes it and no collective runs. Outside run()
// and under OneDeviceStrategy the count is the batch's own; under ParameterServerStrategy a
// worker's. SequenceCrossentropy is immutable and may be shared by replica threads.
//
//   const dist::SequenceCrossentropy loss_fn(/*padding_id=*/vocabulary);
//   at::Tensor loss = loss_fn(targets, logits);  // inside strategy.run()
//
// Why the count must be global, with figures: docs/guide.md, "The loss over the global batch's
// tokens".
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
