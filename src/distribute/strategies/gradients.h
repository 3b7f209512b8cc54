// Gradient helpers shared by the strategies.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace dist::detail {

// Clears gradients for the next step by zeroing them in place rather than freeing them:
// backward then accumulates into the same buffers, and large gradient buffers are not
// returned to and re-requested from the OS (mmap/munmap and page faults) on every step.
inline void clear_gradients(const std::vector<at::Tensor>& params) {
  for (const auto& p : params) {
    at::Tensor grad = p.grad();
    if (grad.defined()) grad.detach().zero_();
  }
}

}  // namespace dist::detail
