// Sample weights shared by losses and metrics.
#pragma once

#include <torch/types.h>

namespace dist::detail {

// sample_weight made to broadcast against per-example values `values`: a scalar, or a tensor
// whose shape is a prefix of values' shape (a trailing axis of size 1 beyond values' rank is
// dropped), expanded to values' shape and dtype. Undefined stays undefined. Throws
// InvalidArgument naming both shapes otherwise.
torch::Tensor broadcast_sample_weight(const torch::Tensor& sample_weight,
                                      const torch::Tensor& values);

}  // namespace dist::detail
