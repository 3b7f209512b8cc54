// The reference models (reference_models.h) built with the Keras API, with the same layer
// names and the same order of weight creation: from the same seed they start from the same
// weights as their torch::nn::Sequential twins, so fit and the custom loop can be compared.
#pragma once

#include <cstdint>
#include <string>

#include "dist/keras/model.h"
#include "dist/models/model_input.h"

namespace dist::models {

// Conv2D 32 3x3 relu (conv1), MaxPooling2D, Conv2D 64 3x3 relu (conv2), MaxPooling2D, Flatten,
// Dense 64 relu (dense1), Dense 10 (dense2, logits) on {1, 28, 28}: 121,930 parameters.
keras::Model keras_tutorial_cnn(const ImageModelInput& input = {});
// Flatten, `hidden_layers` x Dense hidden relu (dense1, dense2, ...), Dense 10 (the last).
keras::Model keras_mlp(int64_t hidden = 4096, int hidden_layers = 2,
                       const ImageModelInput& input = {});
// The Mirrored Strategy tutorial's ResNet for Fashion-MNIST ({1, 28, 28}, padded to 32x32 by
// its first layer): Conv2D 7x7/2 (conv1), BatchNormalization (bn1), ReLU, MaxPooling2D 3/2,
// six residual blocks (block1..block6, make_tutorial_resnet's), GlobalAveragePooling2D,
// Dense 10 (dense, logits). Its BatchNormalization layers are synchronized(...) as asked.
keras::Model keras_tutorial_resnet(bool synchronized_batch_norm = true,
                                   const ImageModelInput& input = {});
// "cnn", "mlp", "mlp_wide", "mlp_deep" (make_mlp's shapes) or "resnet" (its batch
// normalization synchronized as asked), built for `input` (make_model's); InvalidArgument for
// other names.
keras::Model make_keras_model(const std::string& name, bool synchronized_batch_norm = true,
                              const ImageModelInput& input = {});

}  // namespace dist::models
