// Keyed random augmentation: see include/dist/data/augment.h for why every decision is a
// function of (seed, salt, epoch, index, row) and nothing else.
#include "dist/data/augment.h"

#include <ATen/ATen.h>

#include <cmath>

#include "data/images/image_rows.h"
#include "dist/core/error.h"

namespace dist::data {
namespace {

using detail::for_each_row;
using detail::image_of;

// One salt per kind of decision, so that transforms sharing a seed stay independent.
constexpr uint64_t kJitterSalt = 0x6a69747465723031ULL;  // "jitter01"
constexpr uint64_t kFlipSalt = 0x666c69704c523031ULL;    // "flipLR01"

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform draw from [0, n) out of 32 random bits (multiply-shift; n is far below 2^32).
int64_t uniform_below(uint32_t bits, int64_t n) {
  return static_cast<int64_t>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(n)) >> 32);
}

// Source index of each output pixel for nearest resizing with half-pixel centres: output i
// covers input coordinate (i + 0.5) * in / out; integer arithmetic keeps it exact.
at::Tensor nearest_indices(int64_t in, int64_t out) {
  std::vector<int64_t> indices(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) indices[static_cast<size_t>(i)] = (2 * i + 1) * in / (2 * out);
  return at::tensor(indices, at::kLong);
}

// Resizes a [C, H, W] image to [C, size, size].
at::Tensor resize(const at::Tensor& image, int64_t size, Interpolation interpolation) {
  if (interpolation == Interpolation::kNearest) {
    return image.index_select(1, nearest_indices(image.size(1), size))
        .index_select(2, nearest_indices(image.size(2), size));
  }
  return at::upsample_bilinear2d(image.unsqueeze(0), {size, size}, /*align_corners=*/false)
      .squeeze(0);
}

}  // namespace

uint64_t augment_key(uint64_t seed, uint64_t salt, const ElementContext& context, int64_t row) {
  uint64_t key = splitmix64(seed ^ splitmix64(salt));
  key = splitmix64(key ^ static_cast<uint64_t>(context.epoch));
  key = splitmix64(key ^ static_cast<uint64_t>(context.index));
  return splitmix64(key ^ static_cast<uint64_t>(row));
}

ElementTransform random_jitter(uint64_t seed, int64_t resize_to, int64_t crop_to,
                               Interpolation interpolation, size_t component) {
  DIST_CHECK_ARG(resize_to >= 1, "random_jitter: resize_to must be at least 1, got ", resize_to);
  DIST_CHECK_ARG(crop_to >= 1, "random_jitter: crop_to must be at least 1, got ", crop_to);
  DIST_CHECK_ARG(crop_to <= resize_to, "random_jitter: crop_to (", crop_to,
                 ") must not exceed resize_to (", resize_to,
                 "); resize to at least the crop size, e.g. resize_to = crop_to + 6");
  return [=](Element element, const ElementContext& context) {
    const at::Tensor& image = image_of(element, component, "random_jitter");
    const int64_t h = image.size(-2), w = image.size(-1);
    DIST_CHECK_ARG(h >= 1 && w >= 1, "random_jitter: component ", component,
                   " has an empty image (shape ", image.sizes(), "); images need pixels");
    DIST_CHECK_ARG(interpolation == Interpolation::kNearest || image.is_floating_point(),
                   "random_jitter: bilinear interpolation needs a floating-point image, got ",
                   image.scalar_type(), "; convert with .to(at::kFloat) or use kNearest");
    const int64_t range = resize_to - crop_to + 1;
    element[component] = for_each_row(image, [&](const at::Tensor& one, int64_t row) {
      const uint64_t key = augment_key(seed, kJitterSalt, context, row);
      const int64_t top = uniform_below(static_cast<uint32_t>(key), range);
      const int64_t left = uniform_below(static_cast<uint32_t>(key >> 32), range);
      return resize(one, resize_to, interpolation)
          .narrow(1, top, crop_to)
          .narrow(2, left, crop_to)
          .contiguous();
    });
    return element;
  };
}

ElementTransform random_flip_left_right(uint64_t seed, size_t component) {
  return [=](Element element, const ElementContext& context) {
    const at::Tensor& image = image_of(element, component, "random_flip_left_right");
    element[component] = for_each_row(image, [&](const at::Tensor& one, int64_t row) {
      const bool flip = (augment_key(seed, kFlipSalt, context, row) >> 63) != 0;
      return flip ? at::flip(one, {-1}) : one;
    });
    return element;
  };
}

ElementTransform normalize_to_unit_range(double low, double high, size_t component) {
  DIST_CHECK_ARG(std::isfinite(low) && std::isfinite(high) && low < high,
                 "normalize_to_unit_range: needs finite low < high, got low ", low, " and high ",
                 high, "; pass the range of the input, e.g. (0, 255) for bytes");
  return [=](Element element, const ElementContext&) {
    DIST_CHECK_ARG(component < element.size(), "normalize_to_unit_range: the element has ",
                   element.size(), " components, so it has no component ", component,
                   "; pass the index of the image component");
    at::Tensor x = element[component];
    if (!x.is_floating_point()) x = x.to(at::kFloat);
    // (x - low) / (high - low) is exactly 1 at x == high (a number divided by itself), so the
    // ends land exactly on -1 and 1.
    element[component] = x.sub(low).div_(high - low).mul_(2).sub_(1);
    return element;
  };
}

ElementTransform compose(std::vector<ElementTransform> transforms) {
  for (size_t i = 0; i < transforms.size(); ++i)
    DIST_CHECK_ARG(static_cast<bool>(transforms[i]), "compose: transform ", i,
                   " is empty; pass a function such as random_flip_left_right(seed)");
  return [transforms = std::move(transforms)](Element element, const ElementContext& context) {
    for (const auto& transform : transforms) element = transform(std::move(element), context);
    return element;
  };
}

}  // namespace dist::data
