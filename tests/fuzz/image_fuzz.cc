// Fuzzes dist::data::decode_image (libpng and libjpeg-turbo behind the library's error
// handling): the first byte picks the channels asked for (as stored, grey, RGB) and whether the
// image is resized, the rest is the encoded image.
#include <ATen/ATen.h>

#include <array>

#include "dist/data/image_codec.h"
#include "dist/train/image_io.h"
#include "fuzz_util.h"

namespace {

void write_seeds(const std::string& dir) {
  const at::Tensor grey = (at::arange(6 * 5, at::kInt) * 8).to(at::kByte).reshape({1, 6, 5});
  const at::Tensor rgb = (at::arange(3 * 4 * 4, at::kInt) * 5).to(at::kByte).reshape({3, 4, 4});
  dist::fuzz::write_seed(dir, "png_grey", std::string(1, '\0') + dist::encode_png(grey));
  dist::fuzz::write_seed(dir, "png_rgb", std::string(1, '\4') + dist::encode_png(rgb));
  dist::fuzz::write_seed(dir, "jpeg_grey", std::string(1, '\1') + dist::data::encode_jpeg(grey));
  dist::fuzz::write_seed(dir, "jpeg_rgb", std::string(1, '\5') + dist::data::encode_jpeg(rgb));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  dist::fuzz::write_seeds_if_asked(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  dist::data::DecodeImageOptions options;
  options.channels = std::array<int64_t, 3>{0, 1, 3}[data[0] % 3];
  if ((data[0] / 3) % 2 == 1) options.height = options.width = 7;
  dist::fuzz::expect_only_dist_errors([&] {
    at::Tensor image = dist::data::decode_image(data + 1, size - 1, options, "fuzz");
    (void)image.to(at::kDouble).sum().item<double>();  // ASan sees every pixel
  });
  return 0;
}
