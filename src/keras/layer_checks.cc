#include "keras/layer_checks.h"

#include <torch/types.h>

#include "dist/core/error.h"

namespace dist::keras::detail {

std::string describe(const std::string& kind, const std::string& name) {
  return kind + " layer" + (name.empty() ? "" : " '" + name + "'");
}

void check_activation(const std::string& activation) {
  DIST_CHECK_ARG(activation.empty() || activation == "linear" || activation == "relu" ||
                     activation == "sigmoid" || activation == "tanh" || activation == "softmax",
                 "unknown activation '", activation,
                 "': use relu, sigmoid, tanh, softmax, or \"\" for none");
}

// Softmax runs over the feature axis: channels (dim 1) for images, the last axis otherwise.
at::Tensor activate(const at::Tensor& x, const std::string& activation, int64_t feature_dim) {
  if (activation.empty() || activation == "linear") return x;
  if (activation == "relu") return torch::relu(x);
  if (activation == "sigmoid") return torch::sigmoid(x);
  if (activation == "tanh") return torch::tanh(x);
  return torch::softmax(x, feature_dim);
}

void check_padding(const std::string& padding) {
  DIST_CHECK_ARG(padding == "valid" || padding == "same", "unknown padding '", padding,
                 "': use \"valid\" or \"same\"");
}

void check_image(const std::vector<Shape>& inputs, const std::string& what) {
  DIST_CHECK_ARG(inputs[0].size() == 3, what,
                 " expects one example of shape (channels, height, "
                 "width), got ",
                 shape_to_string(inputs[0]),
                 "; images are channels first here, e.g. Input({1, 28, 28})");
}

}  // namespace dist::keras::detail
