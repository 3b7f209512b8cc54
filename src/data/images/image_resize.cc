// resize_image: antialiased bilinear (src/data/images/image_resize_antialias.cc, PIL's filter) or
// TensorFlow's plain bilinear with half-pixel centres by ATen's upsample_bilinear2d in float.
//
// upsample_bilinear2d with align_corners=false and no explicit scale maps output pixel i to
// input coordinate (i + 0.5) * in / out - 0.5, clamped at the edges, and interpolates between
// the two nearest input pixels: the same sampling as TensorFlow's ResizeBilinear with
// half_pixel_centers=true, which tf.image.resize(method="bilinear", antialias=False) calls.
#include <ATen/ATen.h>

#include "data/images/image_resize_antialias.h"
#include "dist/core/error.h"
#include "dist/data/image_codec.h"

namespace dist::data {

at::Tensor resize_image(const at::Tensor& image, int64_t height, int64_t width, bool antialias) {
  DIST_CHECK_ARG(image.defined() && image.dim() == 3 &&
                     (image.scalar_type() == at::kByte || image.is_floating_point()),
                 "resize_image: the image must be a uint8 or floating tensor [C, H, W], got ",
                 image.defined() ? image.toString() : std::string("an undefined tensor"),
                 " of shape ", image.defined() ? image.sizes() : at::IntArrayRef{},
                 "; give an [H, W] image a channel dimension with unsqueeze(0)");
  DIST_CHECK_ARG(image.numel() > 0, "resize_image: the image of shape ", image.sizes(),
                 " has no pixels to interpolate from");
  DIST_CHECK_ARG(height > 0 && width > 0 && height <= kMaxImagePixels / width,
                 "resize_image: the size must be 1 to kMaxImagePixels (", kMaxImagePixels,
                 ") pixels, got height ", height, " and width ", width);
  if (image.size(1) == height && image.size(2) == width)
    return image.clone(at::MemoryFormat::Contiguous);
  if (antialias) return detail::resize_antialiased(image, height, width);
  const at::Tensor resized = at::upsample_bilinear2d(image.to(at::kFloat).unsqueeze(0),
                                                     {height, width}, /*align_corners=*/false)
                                 .squeeze(0);
  if (image.is_floating_point()) return resized.to(image.scalar_type()).contiguous();
  // Interpolated values lie between their neighbours, so the clamp only guards float rounding.
  return resized.round_().clamp_(0, 255).to(at::kByte).contiguous();
}

}  // namespace dist::data
