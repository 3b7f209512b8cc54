// Small Keras models and data shared by the Keras tests.
#pragma once

#include "dist/data/dataset.h"
#include "dist/keras/model.h"
#include "dist/models/keras_models.h"

namespace dist::testing {

// Copies of the weights' values, in the model's order.
inline std::vector<torch::Tensor> weight_values(const keras::Model& model) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, tensor] : model.weights()) out.push_back(tensor.detach().clone());
  return out;
}

// The tutorial CNN with the layer names of dist::models::make_tutorial_cnn.
inline keras::Model keras_tutorial_cnn() { return models::keras_tutorial_cnn(); }

// One residual block with batch normalization, on 1 x 15 x 15 inputs.
inline keras::Model keras_residual_model() {
  using namespace keras::layers;  // NOLINT
  keras::KerasTensor input = keras::Input({1, 15, 15});
  auto x = Conv2D(8, 3).strides(2).padding("same")(input);
  x = BatchNormalization()(x);
  x = ReLU()(x);
  auto y = Conv2D(8, 3).padding("same")(x);
  y = BatchNormalization()(y);
  auto z = ReLU()(Add()({x, y}));
  return keras::Model(input, Dense(10)(GlobalAveragePooling2D()(z)), "residual");
}

}  // namespace dist::testing
