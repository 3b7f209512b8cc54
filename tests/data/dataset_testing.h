// Small datasets and their values, for the data pipeline's tests.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "dist/data/dataset.h"

namespace dist::testing {

// 0..n-1 as a dataset of one int64 scalar per element.
inline data::Dataset range(int64_t n) {
  return data::Dataset::from_tensor_slices({torch::arange(n)});
}

// Component 0 of every element, flattened, as int64 values.
inline std::vector<int64_t> values_of(data::Iterator it) {
  std::vector<int64_t> out;
  while (auto e = it.next()) {
    auto flat = (*e)[0].reshape({-1});
    for (int64_t i = 0; i < flat.size(0); ++i) out.push_back(flat[i].item<int64_t>());
  }
  return out;
}

}  // namespace dist::testing
