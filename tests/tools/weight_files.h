// Weights that dist-train wrote with --save-weights, for the tests that run it as a user would.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace dist::testing {

// The tensors of a safetensors file, in file order.
std::vector<torch::Tensor> weights_in(const std::string& path);

// Both files hold the same tensor names in the same order with bit-identical values (gtest
// expectations, one per differing tensor).
void expect_same_weights(const std::string& path_a, const std::string& path_b);

// The largest difference between the tensors of two weight files, relative to the larger value
// (at least 1); 1 when the files hold no tensors (gtest expects the same number of tensors).
double max_relative_difference(const std::string& path_a, const std::string& path_b);

}  // namespace dist::testing
