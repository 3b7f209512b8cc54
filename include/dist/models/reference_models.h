// The models the tools, benchmarks and examples train.
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/modules/container/sequential.h>

#include "dist/models/model_input.h"

namespace dist::models {

// TensorFlow's custom-training tutorial CNN for 28x28x1 images (input [N,1,28,28]):
// Conv2D 32 3x3 relu, MaxPool 2, Conv2D 64 3x3 relu, MaxPool 2, Flatten, Dense 64 relu,
// Dense 10 (logits). 121,930 parameters, named conv1.*, conv2.*, dense1.*, dense2.*. Its
// activations are channels-last (a first layer "channels_last", see channels_last.h).
// `input` changes conv1's input channels, dense1's inputs (64 x the feature map left of the
// image: images of at least 10x10) and dense2's outputs; the defaults build the tutorial's.
torch::nn::Sequential make_tutorial_cnn(const ImageModelInput& input = {});

// A communication-heavy MLP: Flatten, 784-hidden-...-hidden-10 with relu after each hidden
// layer (hidden 4096, 2 hidden layers: about 20.0M parameters). Named dense1.* to
// dense<hidden_layers + 1>.*. `input`: C x H x W inputs to the first layer, classes outputs
// of the last (the defaults: 784 and 10).
torch::nn::Sequential make_mlp(int64_t hidden = 4096, int hidden_layers = 2,
                               const ImageModelInput& input = {});
// The hidden width of "mlp_wide": 113M parameters, whose Adam state (1.8 GB with the
// parameters and gradients) is what sharding saves (bench/sharding_memory.sh). One layer holds
// 93% of them.
constexpr int64_t kWideMlpHidden = 10240;
// "mlp_deep": 7 hidden layers of 4096, 104M parameters in layers of at most 16.8M: a model
// whose largest layer is small beside the whole, as ZeRO stage 3's memory figure assumes (it
// holds one layer whole at a time).
constexpr int64_t kDeepMlpHidden = 4096;
constexpr int kDeepMlpHiddenLayers = 7;

// The residual network of the Mirrored Strategy tutorial (seed 003) for Fashion-MNIST: the
// input [N,1,28,28] padded to 32x32 (pad), Conv2D 7x7/2, batch normalization, ReLU and
// MaxPooling 3/2 (stem), six residual blocks of two 3x3 convolutions with batch normalization,
// the first of each stage with a projection shortcut and, in stages 2 and 3, stride 2
// (block1..block6, kResnetFilters filters), global average pooling (pool), Dense 10 (dense).
// "same" padding is TensorFlow's, batch normalization has Keras' defaults; with
// `synchronized_batch_norm` every one is a SyncBatchNorm (sync_batch_norm.h). Channels-last.
// `input`: the stem's input channels and the dense layer's classes; any image size (padded by
// 2 on each side, as the tutorial's 28x28 to 32x32).
torch::nn::Sequential make_tutorial_resnet(bool synchronized_batch_norm = true,
                                           const ImageModelInput& input = {});
// The tutorial's filters per stage (its 32x32 feature maps shrink to 8, 4 and 2).
constexpr int64_t kResnetFilters[3] = {64, 128, 256};

// "cnn", "mlp", "mlp_wide", "mlp_deep" or "resnet" (its batch normalization synchronized as
// asked), built for `input`; throws InvalidArgument for other names, and for an input the
// model cannot take (check_image_model_input).
torch::nn::Sequential make_model(const std::string& name, bool synchronized_batch_norm = true,
                                 const ImageModelInput& input = {});

}  // namespace dist::models
