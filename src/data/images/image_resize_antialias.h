// Private: the antialiased (PIL-style) separable bilinear resampler behind resize_image.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace dist::data::detail {

// Resizes `image` [C, H, W] (uint8 or float32, any strides: a narrow()ed crop is read in place)
// to a new contiguous [C, height, width] of the same dtype, as described at resize_image.
// The caller has checked the arguments.
at::Tensor resize_antialiased(const at::Tensor& image, int64_t height, int64_t width);

}  // namespace dist::data::detail
