#include "dist/models/keras_models.h"

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

keras::Model keras_mlp(int64_t hidden) {
  DIST_CHECK_ARG(hidden >= 1, "MLP hidden width must be at least 1, got ", hidden);
  return keras::Sequential({1, 28, 28},
                           {Flatten(), Dense(hidden, "relu").named("dense1"),
                            Dense(hidden, "relu").named("dense2"), Dense(10).named("dense3")},
                           "mlp");
}

keras::Model make_keras_model(const std::string& name) {
  if (name == "cnn") return keras_tutorial_cnn();
  if (name == "mlp") return keras_mlp();
  if (name == "mlp_wide") return keras_mlp(kWideMlpHidden);
  throw InvalidArgument("unknown model '" + name + "': use cnn, mlp or mlp_wide");
}

}  // namespace dist::models
