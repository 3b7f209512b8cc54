// What the layer files of src/keras share (layers.cc's Layer machinery and the layers of
// core_layers.cc, convolution_layers.cc, pooling_layers.cc, batch_normalization.cc, dropout.cc
// and image_layers.cc): how a layer names itself in errors, and the checks and activations of
// their options. Private.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/keras/layers.h"

namespace dist::keras::detail {

// "Conv2D layer 'stem'", or "Conv2D layer" while the layer has no name yet.
std::string describe(const std::string& kind, const std::string& name);

// InvalidArgument unless `activation` is "", "linear", "relu", "sigmoid", "tanh" or "softmax".
void check_activation(const std::string& activation);
// Applies a checked activation; softmax runs over `feature_dim`.
at::Tensor activate(const at::Tensor& x, const std::string& activation, int64_t feature_dim);

// InvalidArgument unless `padding` is "valid" or "same".
void check_padding(const std::string& padding);

// InvalidArgument naming `what` unless inputs[0] is one (channels, height, width) example.
void check_image(const std::vector<Shape>& inputs, const std::string& what);

}  // namespace dist::keras::detail
