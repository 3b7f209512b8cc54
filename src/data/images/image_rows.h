// The image component of an element and a per-image loop over an image or a batch: what every
// image transform (augment.cc, image_transforms.cc) starts from. Private.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "dist/core/error.h"
#include "dist/data/dataset.h"

namespace dist::data::detail {

// The image component of `element`, checked to be [C, H, W] or [N, C, H, W].
inline const at::Tensor& image_of(const Element& element, size_t component, const char* transform) {
  DIST_CHECK_ARG(component < element.size(), transform, ": the element has ", element.size(),
                 " components, so it has no component ", component,
                 "; pass the index of the image component");
  const at::Tensor& image = element[component];
  DIST_CHECK_ARG(image.defined() && (image.dim() == 3 || image.dim() == 4), transform,
                 ": component ", component,
                 " must be an image [C, H, W] or a batch of images [N, C, H, W], got shape ",
                 image.defined() ? image.sizes() : at::IntArrayRef{},
                 "; give [H, W] images a channel dimension with unsqueeze(0)");
  return image;
}

// Applies `per_row(image, row)` to an image [C, H, W] (row 0) or each image of a batch.
inline at::Tensor for_each_row(
    const at::Tensor& images,
    const std::function<at::Tensor(const at::Tensor&, int64_t)>& per_row) {
  if (images.dim() == 3) return per_row(images, 0);
  if (images.size(0) == 0)  // learn the output's shape from one blank image
    return per_row(at::zeros(images.sizes().slice(1), images.options()), 0)
        .unsqueeze(0)
        .narrow(0, 0, 0);
  std::vector<at::Tensor> rows;
  rows.reserve(static_cast<size_t>(images.size(0)));
  for (int64_t n = 0; n < images.size(0); ++n) rows.push_back(per_row(images[n], n));
  return at::stack(rows);
}

}  // namespace dist::data::detail
