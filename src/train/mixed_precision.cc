#include "dist/train/mixed_precision.h"

#include <ATen/autocast_mode.h>

#include <atomic>

#include "dist/core/error.h"

namespace dist::mixed_precision {
namespace {

std::atomic<Policy> global{Policy::kFloat32};

}  // namespace

Policy policy_from_name(const std::string& name) {
  if (name == "float32" || name == "fp32") return Policy::kFloat32;
  if (name == "mixed_bfloat16" || name == "bf16" || name == "bfloat16") {
    return Policy::kMixedBFloat16;
  }
  if (name == "mixed_float16" || name == "fp16" || name == "float16") {
    return Policy::kMixedFloat16;
  }
  throw InvalidArgument(
      detail::concat("unknown mixed precision policy '", name,
                     "'; use float32, mixed_bfloat16 (bf16) or mixed_float16 (fp16, GPU only)"));
}

std::string policy_name(Policy policy) {
  switch (policy) {
    case Policy::kFloat32:
      return "float32";
    case Policy::kMixedBFloat16:
      return "mixed_bfloat16";
    case Policy::kMixedFloat16:
      return "mixed_float16";
  }
  return "unknown";
}

void set_global_policy(Policy policy) {
  check_supported(policy);
  global.store(policy);
}

Policy global_policy() { return global.load(); }

void check_supported(Policy policy) {
  // LibTorch's CPU kernels for matrix products and convolutions have no float16 version
  // ("addmm_impl_cpu_" not implemented for 'Half'), and Debian's LibTorch has no CUDA.
  DIST_CHECK_ARG(policy != Policy::kMixedFloat16,
                 "mixed_float16 needs a GPU: LibTorch's CPU matrix and convolution kernels have "
                 "no float16 version, and this build is CPU only. On CPU use mixed_bfloat16 "
                 "(bf16), which has float32's range and needs no loss scaling");
}

AutocastScope::AutocastScope(Policy policy) {
  if (policy == Policy::kFloat32) return;
  check_supported(policy);
  was_enabled_ = at::autocast::is_cpu_enabled();
  previous_dtype_ = static_cast<int>(at::autocast::get_autocast_cpu_dtype());
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Leaving the outermost scope drops the weights' cached casts: the next step's weights differ.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(was_enabled_);
  at::autocast::set_autocast_cpu_dtype(static_cast<at::ScalarType>(previous_dtype_));
}

at::Tensor forward_in_policy(const std::function<at::Tensor()>& forward, Policy policy) {
  if (policy == Policy::kFloat32) return forward();
  at::Tensor output;
  {
    AutocastScope autocast(policy);
    output = forward();
  }
  const auto type = output.scalar_type();
  return type == at::kBFloat16 || type == at::kHalf ? output.to(at::kFloat) : output;
}

}  // namespace dist::mixed_precision
