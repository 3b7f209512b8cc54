#include "dist/models/keras_models.h"

#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/models/reference_models.h"

namespace dist::models {

using namespace keras::layers;  // NOLINT: layer names read better unqualified here

keras::Model keras_tutorial_cnn() {
  return keras::Sequential(
      {1, 28, 28},
      {Conv2D(32, 3).activation("relu").named("conv1"), MaxPooling2D(),
       Conv2D(64, 3).activation("relu").named("conv2"), MaxPooling2D(), Flatten(),
       Dense(64, "relu").named("dense1"), Dense(10).named("dense2")},
      "tutorial_cnn");
}

keras::Model keras_mlp(int64_t hidden, int hidden_layers) {
  DIST_CHECK_ARG(hidden >= 1, "MLP hidden width must be at least 1, got ", hidden);
  DIST_CHECK_ARG(hidden_layers >= 1, "an MLP needs at least 1 hidden layer, got ", hidden_layers);
  std::vector<keras::Layer> layers{Flatten()};
  for (int k = 1; k <= hidden_layers; ++k)
    layers.push_back(Dense(hidden, "relu").named("dense" + std::to_string(k)));
  layers.push_back(Dense(10).named("dense" + std::to_string(hidden_layers + 1)));
  return keras::Sequential({1, 28, 28}, layers, "mlp");
}

keras::Model make_keras_model(const std::string& name) {
  if (name == "cnn") return keras_tutorial_cnn();
  if (name == "mlp") return keras_mlp();
  if (name == "mlp_wide") return keras_mlp(kWideMlpHidden);
  if (name == "mlp_deep") return keras_mlp(kDeepMlpHidden, kDeepMlpHiddenLayers);
  throw InvalidArgument("unknown model '" + name + "': use cnn, mlp, mlp_wide or mlp_deep");
}

}  // namespace dist::models
