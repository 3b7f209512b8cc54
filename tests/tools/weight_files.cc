#include "tools/weight_files.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "dist/train/safetensors.h"

namespace dist::testing {

std::vector<torch::Tensor> weights_in(const std::string& path) {
  std::vector<torch::Tensor> values;
  // Counters (batch norm's num_batches_tracked) as doubles: compared like the rest.
  for (const auto& [name, tensor] : load_safetensors(path).tensors)
    values.push_back(tensor.is_floating_point() ? tensor : tensor.to(torch::kDouble));
  return values;
}

void expect_same_weights(const std::string& path_a, const std::string& path_b) {
  auto a = load_safetensors(path_a).tensors, b = load_safetensors(path_b).tensors;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first << " differs";
  }
}

double max_relative_difference(const std::string& path_a, const std::string& path_b) {
  const auto x = weights_in(path_a), y = weights_in(path_b);
  EXPECT_EQ(x.size(), y.size());
  double largest = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    const auto scale = torch::clamp_min(torch::maximum(x[i].abs(), y[i].abs()), 1.0);
    largest = std::max(largest, ((x[i] - y[i]).abs() / scale).max().item<double>());
  }
  return x.empty() ? 1.0 : largest;
}

}  // namespace dist::testing
