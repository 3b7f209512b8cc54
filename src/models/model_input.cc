#include "dist/models/model_input.h"

#include "dist/core/error.h"

namespace dist::models {

std::string describe(const ImageModelInput& input) {
  return detail::concat(input.channels, "x", input.height, "x", input.width, " images -> ",
                        input.classes, " classes");
}

void check_image_model_input(const ImageModelInput& input, const std::string& model,
                             int64_t min_side) {
  DIST_CHECK_ARG(input.channels == 1 || input.channels == 3, "model ", model,
                 ": images of 1 (grey) or 3 (RGB) channels, got ", input.channels);
  DIST_CHECK_ARG(input.classes >= 1, "model ", model, ": at least 1 class, got ", input.classes);
  DIST_CHECK_ARG(input.height >= min_side && input.width >= min_side, "model ", model,
                 " takes images of at least ", min_side, "x", min_side, " pixels, got ",
                 input.height, "x", input.width, "; resize the images first");
}

}  // namespace dist::models
