// Small Keras models and data shared by the Keras tests.
#pragma once

#include <torch/torch.h>
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

// Fit options for `epochs` epochs that print nothing.
inline keras::FitOptions quiet(int epochs = 1) {
  keras::FitOptions options;
  options.epochs = epochs;
  options.verbose = 0;
  return options;
}

// The tutorial CNN with the layer names of dist::models::make_tutorial_cnn.
inline keras::Model keras_tutorial_cnn() { return models::keras_tutorial_cnn(); }

// One residual block with batch normalization (over the global batch if `synchronized`), on
// 1 x 15 x 15 inputs.
inline keras::Model keras_residual_model(bool synchronized = false) {
  using namespace keras::layers;  // NOLINT
  keras::KerasTensor input = keras::Input({1, 15, 15});
  auto x = Conv2D(8, 3).strides(2).padding("same")(input);
  x = BatchNormalization().synchronized(synchronized)(x);
  x = ReLU()(x);
  auto y = Conv2D(8, 3).padding("same")(x);
  y = BatchNormalization().synchronized(synchronized)(y);
  auto z = ReLU()(Add()({x, y}));
  return keras::Model(input, Dense(10)(GlobalAveragePooling2D()(z)), "residual");
}

// keras_residual_model (seed 3) fitted for 2 epochs of 4 global batches of 16 under `strategy`
// (its batch norm statistics move every step).
inline keras::Model keras_batchnorm_fit(const Strategy& strategy, bool synchronized = false) {
  torch::manual_seed(3);
  keras::Model model = keras_residual_model(synchronized);
  model.compile(strategy, keras::optimizers::SGD(0.05), SparseCategoricalCrossentropy(true));
  torch::manual_seed(5);
  auto x = torch::rand({64, 1, 15, 15});
  auto y = torch::randint(0, 10, {64});
  keras::FitOptions options;
  options.epochs = 2;
  options.verbose = 0;
  model.fit(data::Dataset::from_tensor_slices({x, y}).batch(16), options);
  return model;
}

}  // namespace dist::testing
