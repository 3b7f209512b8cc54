// The in-memory form of an image classification data set, as the loaders return it.
#pragma once

#include <ATen/core/Tensor.h>

namespace dist::data {

struct ImageLabelTensors {
  at::Tensor images;  // float32 [N, C, H, W], values in [0, 1]
  at::Tensor labels;  // int64 [N], class indices
};

}  // namespace dist::data
