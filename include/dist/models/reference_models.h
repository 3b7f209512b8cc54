// The models the tools, benchmarks and examples train.
#pragma once

#include <string>

#include <torch/nn/modules/container/sequential.h>

namespace dist::models {

// TensorFlow's custom-training tutorial CNN for 28x28x1 images (input [N,1,28,28]):
// Conv2D 32 3x3 relu, MaxPool 2, Conv2D 64 3x3 relu, MaxPool 2, Flatten, Dense 64 relu,
// Dense 10 (logits). 121,930 parameters, named conv1.*, conv2.*, dense1.*, dense2.*. Its
// activations are channels-last (a first layer "channels_last", see channels_last.h).
torch::nn::Sequential make_tutorial_cnn();

// A communication-heavy MLP: Flatten, 784-hidden-hidden-10 with relu (hidden 4096: about
// 20.0M parameters). Named dense1.*, dense2.*, dense3.*.
torch::nn::Sequential make_mlp(int64_t hidden = 4096);
// The hidden width of "mlp_wide": 113M parameters, whose Adam state (1.8 GB with the
// parameters and gradients) is what sharding saves (bench/sharding_memory.sh).
constexpr int64_t kWideMlpHidden = 10240;

// "cnn", "mlp" or "mlp_wide"; throws InvalidArgument for other names.
torch::nn::Sequential make_model(const std::string& name);

}  // namespace dist::models
