#include "dist/train/image_io.h"

#include <algorithm>
#include <cmath>

#include "core/atomic_file.h"
#include "dist/core/error.h"
#include "dist/data/image_codec.h"

namespace dist {

at::Tensor to_uint8_image(const at::Tensor& values, double low, double high) {
  DIST_CHECK_ARG(values.defined(), "to_uint8_image: the tensor is undefined");
  DIST_CHECK_ARG(std::isfinite(low) && std::isfinite(high) && low < high,
                 "to_uint8_image: the range [", low, ", ", high,
                 "] is empty or not finite; pass low < high, e.g. (0, 1) or (-1, 1)");
  DIST_CHECK_ARG(!values.is_complex(), "to_uint8_image: complex values (", values.scalar_type(),
                 ") have no pixel value; pass the real part or the magnitude");
  // In double, so the ends map exactly (-1 and 1 to 0 and 255) whatever the input dtype.
  auto scaled = (values.to(at::kDouble) - low) * (255.0 / (high - low));
  scaled = at::nan_to_num(scaled, /*nan=*/0.0, /*posinf=*/255.0, /*neginf=*/0.0);
  return at::floor(scaled.clamp(0.0, 255.0) + 0.5).to(at::kByte);
}

at::Tensor image_grid(const std::vector<at::Tensor>& images, int64_t columns, int64_t padding,
                      double pad_value) {
  DIST_CHECK_ARG(!images.empty(), "image_grid: no images to tile");
  DIST_CHECK_ARG(columns >= 1, "image_grid: columns must be at least 1, got ", columns);
  DIST_CHECK_ARG(padding >= 0, "image_grid: padding must be 0 or more pixels, got ", padding);
  const at::Tensor& first = images[0];
  DIST_CHECK_ARG(first.defined() && (first.dim() == 2 || first.dim() == 3),
                 "image_grid: images must be [C,H,W] or [H,W], image 0 is ",
                 first.defined() ? first.sizes() : at::IntArrayRef{});
  for (size_t i = 1; i < images.size(); ++i) {
    DIST_CHECK_ARG(images[i].defined() && images[i].sizes() == first.sizes() &&
                       images[i].scalar_type() == first.scalar_type(),
                   "image_grid: every image must have the shape and dtype of image 0 (",
                   first.sizes(), " ", first.scalar_type(), "), image ", i, " is ",
                   images[i].defined() ? images[i].sizes() : at::IntArrayRef{}, " ",
                   images[i].defined() ? images[i].scalar_type() : at::ScalarType::Undefined);
  }
  if (first.scalar_type() == at::kByte)
    DIST_CHECK_ARG(pad_value >= 0 && pad_value <= 255,
                   "image_grid: pad_value must be a uint8 pixel value (0 to 255), got ", pad_value);

  const int64_t count = static_cast<int64_t>(images.size());
  const int64_t cols = std::min(columns, count), rows = (count + cols - 1) / cols;
  const int64_t channels = first.dim() == 2 ? 1 : first.size(0);
  const int64_t height = first.size(-2), width = first.size(-1);
  at::Tensor grid =
      at::full({channels, rows * (height + padding) + padding, cols * (width + padding) + padding},
               pad_value, first.options());
  for (int64_t i = 0; i < count; ++i) {
    const int64_t top = padding + (i / cols) * (height + padding);
    const int64_t left = padding + (i % cols) * (width + padding);
    grid.narrow(1, top, height)
        .narrow(2, left, width)
        .copy_(images[i].reshape({channels, height, width}));
  }
  return first.dim() == 2 ? grid.squeeze(0) : grid;
}

void write_png(const std::string& path, const at::Tensor& image, Env* env) {
  const std::string bytes =
      data::encode_png(image);  // bad images fail before the file system is touched
  detail::write_file_atomically(
      env, path, "PNG image", [&](WritableFile& file) { file.append(bytes.data(), bytes.size()); });
}

}  // namespace dist
