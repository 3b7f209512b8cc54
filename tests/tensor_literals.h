// Tensors written out in a test: a list of values in the dtype the test means.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include <torch/torch.h>

namespace dist::testing {

inline torch::Tensor doubles(std::initializer_list<double> values) {
  return torch::tensor(std::vector<double>(values), torch::kDouble);
}

inline torch::Tensor longs(std::initializer_list<int64_t> values) {
  return torch::tensor(std::vector<int64_t>(values), torch::kLong);
}

}  // namespace dist::testing
