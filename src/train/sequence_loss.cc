// The sequence loss over the global batch's tokens (dist/train/sequence_loss.h).
#include "dist/train/sequence_loss.h"

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"

namespace dist {
namespace {

torch::Tensor as_bool_mask(const torch::Tensor& mask) {
  return mask.scalar_type() == torch::kBool ? mask : mask.ne(0);
}

}  // namespace

int64_t global_token_count(const torch::Tensor& mask) {
  DIST_CHECK_ARG(mask.defined(), "global_token_count: the mask is an undefined tensor");
  const int64_t local = as_bool_mask(mask).sum().item<int64_t>();
  ReplicaContext* context = get_replica_context();
  if (context == nullptr || context->num_replicas_in_sync() <= 1) return local;
  // float64 counts exactly up to 2^53 tokens and every transport sums it.
  const at::Tensor total = context->all_reduce(
      ReduceOp::kSum, torch::full({1}, static_cast<double>(local), torch::kFloat64));
  return static_cast<int64_t>(total.item<double>());
}

torch::Tensor compute_average_token_loss(const torch::Tensor& per_token_loss,
                                         const torch::Tensor& mask, int64_t global_token_count) {
  DIST_CHECK_ARG(per_token_loss.defined() && mask.defined(),
                 "compute_average_token_loss: per_token_loss and mask must be defined tensors");
  DIST_CHECK_ARG(per_token_loss.sizes() == mask.sizes(),
                 "compute_average_token_loss: per_token_loss of shape ", per_token_loss.sizes(),
                 " and mask of shape ", mask.sizes(), " differ; give one mask entry per token");
  DIST_CHECK_ARG(global_token_count >= -1, "compute_average_token_loss: global_token_count ",
                 "must be >= 0 (or -1 to all-reduce the mask's count), got ", global_token_count);
  const int64_t count =
      global_token_count == -1 ? dist::global_token_count(mask) : global_token_count;
  const torch::Tensor losses =
      per_token_loss.is_floating_point() ? per_token_loss : per_token_loss.to(torch::kFloat);
  // where(), not a product: a padded position may hold inf or NaN (a logit of a padded step),
  // which times 0 would still be NaN.
  const torch::Tensor total =
      torch::where(as_bool_mask(mask), losses, torch::zeros({}, losses.options())).sum();
  if (count == 0) return total;  // no real token anywhere: 0, still in the graph
  return total / static_cast<double>(count);
}

SequenceCrossentropy::SequenceCrossentropy(int64_t padding_id) : padding_id_(padding_id) {}

torch::Tensor SequenceCrossentropy::token_mask(const torch::Tensor& targets,
                                               const torch::Tensor& mask) const {
  DIST_CHECK_ARG(targets.defined(), "SequenceCrossentropy: targets is an undefined tensor");
  if (mask.defined()) {
    DIST_CHECK_ARG(mask.sizes() == targets.sizes(), "SequenceCrossentropy: the mask of shape ",
                   mask.sizes(), " is not the shape of the targets, ", targets.sizes(),
                   "; give one entry per token (true for a real token, false for padding)");
    return as_bool_mask(mask);
  }
  if (padding_id_ != kNoPaddingId) return targets.ne(padding_id_);
  return torch::ones(targets.sizes(), targets.options().dtype(torch::kBool));
}

torch::Tensor SequenceCrossentropy::per_token(const torch::Tensor& targets,
                                              const torch::Tensor& logits,
                                              const torch::Tensor& mask) const {
  DIST_CHECK_ARG(targets.defined() && logits.defined(),
                 "SequenceCrossentropy: targets and logits must be defined tensors");
  DIST_CHECK_ARG(logits.dim() == 3 && logits.is_floating_point(),
                 "SequenceCrossentropy: logits must be floating [batch, time, vocabulary], got ",
                 logits.dim(), " dimensions ", logits.sizes(), " of dtype ", logits.scalar_type());
  DIST_CHECK_ARG(!targets.is_floating_point() && targets.scalar_type() != torch::kBool &&
                     targets.sizes() == logits.sizes().slice(0, 2),
                 "SequenceCrossentropy: targets must be integer token ids of shape [batch, "
                 "time] = ",
                 logits.sizes().slice(0, 2), " to match logits of shape ", logits.sizes(), ", got ",
                 targets.sizes(), " of dtype ", targets.scalar_type());
  const torch::Tensor real = token_mask(targets, mask);
  const int64_t vocabulary = logits.size(2);
  const torch::Tensor ids = targets.to(torch::kLong);
  const torch::Tensor out_of_range = real & (ids.lt(0) | ids.ge(vocabulary));
  if (out_of_range.any().item<bool>()) {
    const torch::Tensor where = out_of_range.nonzero()[0];
    const int64_t b = where[0].item<int64_t>();
    const int64_t t = where[1].item<int64_t>();
    throw InvalidArgument(
        detail::concat("SequenceCrossentropy: the target at [", b, ", ", t, "] is token id ",
                       ids[b][t].item<int64_t>(), ", outside the vocabulary of ", vocabulary,
                       " (logits of shape ", logits.sizes(), "); ",
                       padding_id_ == kNoPaddingId && !mask.defined()
                           ? "if it marks padding, give the padding id or a mask"
                           : "the model's vocabulary must cover every real token"));
  }
  // Padded positions compute on zero logits and id 0 (any valid id) and are then zeroed: a
  // padded step's logits may be inf or NaN, which log_softmax's gradient would spread as NaN
  // even through a zeroed loss; where() passes no gradient to them at all.
  const torch::Tensor safe_ids = torch::where(real, ids, torch::zeros({}, ids.options()));
  const torch::Tensor safe_logits =
      torch::where(real.unsqueeze(2), logits, torch::zeros({}, logits.options()));
  const torch::Tensor log_probabilities = torch::log_softmax(safe_logits, /*dim=*/2);
  const torch::Tensor losses = -log_probabilities.gather(2, safe_ids.unsqueeze(2)).squeeze(2);
  return torch::where(real, losses, torch::zeros({}, losses.options()));
}

torch::Tensor SequenceCrossentropy::operator()(const torch::Tensor& targets,
                                               const torch::Tensor& logits,
                                               const torch::Tensor& mask,
                                               int64_t global_token_count) const {
  return compute_average_token_loss(per_token(targets, logits, mask), token_mask(targets, mask),
                                    global_token_count);
}

}  // namespace dist
