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

// A communication-heavy MLP: Flatten, 784-hidden-...-hidden-10 with relu after each hidden
// layer (hidden 4096, 2 hidden layers: about 20.0M parameters). Named dense1.* to
// dense<hidden_layers + 1>.*.
torch::nn::Sequential make_mlp(int64_t hidden = 4096, int hidden_layers = 2);
// The hidden width of "mlp_wide": 113M parameters, whose Adam state (1.8 GB with the
// parameters and gradients) is what sharding saves (bench/sharding_memory.sh). One layer holds
// 93% of them.
constexpr int64_t kWideMlpHidden = 10240;
// "mlp_deep": 7 hidden layers of 4096, 104M parameters in layers of at most 16.8M: a model
// whose largest layer is small beside the whole, as ZeRO stage 3's memory figure assumes (it
// holds one layer whole at a time).
constexpr int64_t kDeepMlpHidden = 4096;
constexpr int kDeepMlpHiddenLayers = 7;

// "cnn", "mlp", "mlp_wide" or "mlp_deep"; throws InvalidArgument for other names.
torch::nn::Sequential make_model(const std::string& name);

}  // namespace dist::models
