#include "dist/models/keras_models.h"

#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/models/reference_models.h"

namespace dist::models {

using namespace keras::layers;  // NOLINT: layer names read better unqualified here

keras::Model keras_tutorial_cnn(const ImageModelInput& input) {
  check_image_model_input(input, "cnn", /*min_side=*/10);
  return keras::Sequential(
      {input.channels, input.height, input.width},
      {Conv2D(32, 3).activation("relu").named("conv1"), MaxPooling2D(),
       Conv2D(64, 3).activation("relu").named("conv2"), MaxPooling2D(), Flatten(),
       Dense(64, "relu").named("dense1"), Dense(input.classes).named("dense2")},
      "tutorial_cnn");
}

keras::Model keras_mlp(int64_t hidden, int hidden_layers, const ImageModelInput& input) {
  check_image_model_input(input, "mlp");
  DIST_CHECK_ARG(hidden >= 1, "MLP hidden width must be at least 1, got ", hidden);
  DIST_CHECK_ARG(hidden_layers >= 1, "an MLP needs at least 1 hidden layer, got ", hidden_layers);
  std::vector<keras::Layer> layers{Flatten()};
  for (int k = 1; k <= hidden_layers; ++k)
    layers.push_back(Dense(hidden, "relu").named("dense" + std::to_string(k)));
  layers.push_back(Dense(input.classes).named("dense" + std::to_string(hidden_layers + 1)));
  return keras::Sequential({input.channels, input.height, input.width}, layers, "mlp");
}

namespace {

using keras::KerasTensor;

// The tutorial's resnet_block: two 3x3 convolutions with batch normalization, the second
// added to the shortcut (a 1x1 convolution with batch normalization when it projects).
KerasTensor resnet_block(const KerasTensor& input, const std::string& name, int64_t filters,
                         int64_t strides, bool projection, bool synchronized) {
  KerasTensor shortcut = input;
  if (projection) {
    shortcut = Conv2D(filters, 1).strides(strides).named(name + "_shortcut_conv")(input);
    shortcut =
        BatchNormalization().synchronized(synchronized).named(name + "_shortcut_bn")(shortcut);
  }
  KerasTensor x = Conv2D(filters, 3).strides(strides).padding("same").named(name + "_conv1")(input);
  x = BatchNormalization().synchronized(synchronized).named(name + "_bn1")(x);
  x = ReLU()(x);
  x = Conv2D(filters, 3).padding("same").named(name + "_conv2")(x);
  x = BatchNormalization().synchronized(synchronized).named(name + "_bn2")(x);
  return ReLU()(Add()({x, shortcut}));
}

}  // namespace

keras::Model keras_tutorial_resnet(bool synchronized_batch_norm, const ImageModelInput& input) {
  check_image_model_input(input, "resnet");
  const bool sync = synchronized_batch_norm;
  KerasTensor inputs = keras::Input({input.channels, input.height, input.width});
  KerasTensor x = ZeroPadding2D(2)(inputs);  // 32x32, the tutorial's CIFAR-10 size
  x = Conv2D(kResnetFilters[0], 7).strides(2).padding("same").named("conv1")(x);
  x = BatchNormalization().synchronized(sync).named("bn1")(x);
  x = ReLU()(x);
  x = MaxPooling2D(3).strides(2).padding("same")(x);
  for (size_t stage = 0; stage < 3; ++stage) {
    const std::string name = "block" + std::to_string(2 * stage + 1);
    x = resnet_block(x, name, kResnetFilters[stage], stage == 0 ? 1 : 2, true, sync);
    x = resnet_block(x, "block" + std::to_string(2 * stage + 2), kResnetFilters[stage], 1, false,
                     sync);
  }
  x = GlobalAveragePooling2D()(x);
  return keras::Model(inputs, Dense(input.classes).named("dense")(x), "tutorial_resnet");
}

keras::Model make_keras_model(const std::string& name, bool synchronized_batch_norm,
                              const ImageModelInput& input) {
  if (name == "resnet") return keras_tutorial_resnet(synchronized_batch_norm, input);
  if (name == "cnn") return keras_tutorial_cnn(input);
  if (name == "mlp") return keras_mlp(4096, 2, input);
  if (name == "mlp_wide") return keras_mlp(kWideMlpHidden, 2, input);
  if (name == "mlp_deep") return keras_mlp(kDeepMlpHidden, kDeepMlpHiddenLayers, input);
  throw InvalidArgument("unknown model '" + name + "': use cnn, mlp, mlp_wide, mlp_deep or resnet");
}

}  // namespace dist::models
