#include "dist/models/reference_models.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>

#include <string>

#include "dist/core/error.h"
#include "dist/models/channels_last.h"

namespace dist::models {

using namespace torch::nn;  // NOLINT: layer names read better unqualified here

Sequential make_tutorial_cnn() {
  // Channels-last activations: 1.5x faster on CPU (channels_last.h); parameters unchanged.
  return Sequential({{"channels_last", ChannelsLast()},
                     {"conv1", Conv2d(Conv2dOptions(1, 32, 3))},
                     {"relu1", ReLU()},
                     {"pool1", MaxPool2d(MaxPool2dOptions(2))},
                     {"conv2", Conv2d(Conv2dOptions(32, 64, 3))},
                     {"relu2", ReLU()},
                     {"pool2", MaxPool2d(MaxPool2dOptions(2))},
                     {"flatten", Flatten()},
                     {"dense1", Linear(64 * 5 * 5, 64)},
                     {"relu3", ReLU()},
                     {"dense2", Linear(64, 10)}});
}

Sequential make_mlp(int64_t hidden, int hidden_layers) {
  DIST_CHECK_ARG(hidden >= 1, "MLP hidden width must be at least 1, got ", hidden);
  DIST_CHECK_ARG(hidden_layers >= 1, "an MLP needs at least 1 hidden layer, got ", hidden_layers);
  Sequential mlp;
  mlp->push_back("flatten", Flatten());
  for (int k = 1; k <= hidden_layers; ++k) {
    mlp->push_back("dense" + std::to_string(k), Linear(k == 1 ? 28 * 28 : hidden, hidden));
    mlp->push_back("relu" + std::to_string(k), ReLU());
  }
  mlp->push_back("dense" + std::to_string(hidden_layers + 1), Linear(hidden, 10));
  return mlp;
}

Sequential make_model(const std::string& name, bool synchronized_batch_norm) {
  if (name == "resnet") return make_tutorial_resnet(synchronized_batch_norm);
  if (name == "cnn") return make_tutorial_cnn();
  if (name == "mlp") return make_mlp();
  if (name == "mlp_wide") return make_mlp(kWideMlpHidden);
  if (name == "mlp_deep") return make_mlp(kDeepMlpHidden, kDeepMlpHiddenLayers);
  throw InvalidArgument("unknown model '" + name + "': use cnn, mlp, mlp_wide, mlp_deep or resnet");
}

}  // namespace dist::models
