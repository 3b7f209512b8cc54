// What a built-in model is built for: the images it takes (channels, height, width) and the
// classes it tells apart. The defaults are Fashion-MNIST's, for which the reference models were
// written (1 x 28 x 28, 10 classes); a user's data gives its own (dist-train finds them in the
// data: tools/training_data.h).
#pragma once

#include <cstdint>
#include <string>

namespace dist::models {

struct ImageModelInput {
  int64_t channels = 1;  // 1 (grey) or 3 (RGB)
  int64_t height = 28;
  int64_t width = 28;
  int64_t classes = 10;  // logits per image
};

// "3x64x64 images -> 5 classes", for headers and messages.
std::string describe(const ImageModelInput& input);

// InvalidArgument naming `model` unless every value is positive, the channels are 1 or 3 and the
// images are at least `min_side` pixels a side (a model's smallest image).
void check_image_model_input(const ImageModelInput& input, const std::string& model,
                             int64_t min_side = 1);

}  // namespace dist::models
