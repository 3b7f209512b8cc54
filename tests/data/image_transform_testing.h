// What the tests of image_transforms.h share (image_transforms_test.cc and
// image_transforms_torchvision_test.cc): a reproducible test image, and a transform run on it.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "dist/data/image_transforms.h"

namespace dist::data::image_testing {

// A reproducible image: smooth gradients plus noise, so that resampling has edges to blur.
inline at::Tensor test_image(int64_t channels, int64_t height, int64_t width, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  const at::Tensor y = torch::arange(height, torch::kFloat).view({1, height, 1});
  const at::Tensor x = torch::arange(width, torch::kFloat).view({1, 1, width});
  const at::Tensor c = torch::arange(channels, torch::kFloat).view({channels, 1, 1});
  const at::Tensor smooth = 127.5f + 100.0f * torch::sin(x * 0.21f + y * 0.13f + c);
  const at::Tensor noise = torch::randint(-27, 28, {channels, height, width}).to(torch::kFloat);
  return (smooth + noise).clamp(0, 255).to(torch::kUInt8);
}

// `transform` of an element (image, label 7).
inline Element run(const ElementTransform& transform, const at::Tensor& image,
                   ElementContext context = {}) {
  return transform({image, torch::tensor(7)}, context);
}

}  // namespace dist::data::image_testing
