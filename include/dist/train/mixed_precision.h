// Mixed precision, after Keras' policies (tf.keras.mixed_precision): layers compute in a 16-bit
// type while the variables, their gradients, the all-reduce and the optimizer stay float32.
//
//   dist::mixed_precision::set_global_policy(dist::mixed_precision::Policy::kMixedBFloat16);
//   // A dist::keras::Model made from now on takes it (Model::set_dtype_policy changes one
//   // model's); its fit, evaluate and predict run their forward passes under it.
//
//   // A custom loop opens a scope around the forward pass, inside strategy.run():
//   auto logits = dist::mixed_precision::forward_in_policy([&] { return model->forward(x); });
//   auto loss = loss_fn(y, logits);  // float32 logits; the backward pass follows autocast's casts
//
// On CPU only bfloat16 is available (LibTorch's CPU autocast; CPUs with AVX512-BF16 or AMX run
// it natively). float16 needs a GPU, and this build has none: a scope for kMixedFloat16 is
// refused with that reason. float16's narrow range is what LossScaleOptimizer
// (loss_scale_optimizer.h) is for; bfloat16 has float32's range and needs no loss scaling.
//
// The autocast state is per thread: the scope must be opened on the thread that runs the
// forward pass (inside the function given to strategy.run(), which runs on each replica's
// thread).
#pragma once

#include <functional>
#include <string>

#include <ATen/core/Tensor.h>

namespace dist::mixed_precision {

enum class Policy {
  kFloat32,        // everything in float32 (the default)
  kMixedBFloat16,  // compute in bfloat16, variables in float32 ("mixed_bfloat16")
  kMixedFloat16,   // compute in float16, variables in float32 ("mixed_float16"; GPU only)
};

// "float32", "mixed_bfloat16" (or "bf16", "bfloat16"), "mixed_float16" (or "fp16", "float16").
// InvalidArgument naming the accepted names otherwise.
Policy policy_from_name(const std::string& name);
// Keras' name: "float32", "mixed_bfloat16", "mixed_float16".
std::string policy_name(Policy policy);

// The policy a keras::Model takes when it is made, and AutocastScope's default. Process-wide,
// as in Keras; set it before making models, not while a step runs.
void set_global_policy(Policy policy);
Policy global_policy();

// Throws InvalidArgument when `policy` cannot run in this build (kMixedFloat16 without CUDA),
// saying what to use instead.
void check_supported(Policy policy);

// Runs the operations of its lifetime, on this thread, in the policy's compute type where
// LibTorch's autocast lists them (matrix products and convolutions; reductions that need the
// range stay float32). kFloat32 changes nothing. Scopes nest; the outermost one's end drops the
// cached bfloat16 copies of the weights.
class AutocastScope {
 public:
  explicit AutocastScope(Policy policy = global_policy());
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  bool was_enabled_ = false;
  int previous_dtype_ = 0;  // at::ScalarType, kept out of this header
};

// forward() (a model's forward pass) in an AutocastScope for `policy`, its output returned in
// float32: Keras keeps a model's outputs float32 under mixed precision, so that losses,
// metrics and predictions keep their precision. Model's fit / evaluate / predict use it.
at::Tensor forward_in_policy(const std::function<at::Tensor()>& forward,
                             Policy policy = global_policy());

}  // namespace dist::mixed_precision
