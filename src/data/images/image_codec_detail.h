// What the PNG and JPEG decoders (image_png.cc, image_jpeg.cc) share with decode_image
// (image_decode.cc). See include/dist/data/image_codec.h for the pixel conventions.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dist/data/image_codec.h"

namespace dist::data::detail {

// InvalidArgument naming the option unless `options` are what DecodeImageOptions accepts.
void check_decode_options(const DecodeImageOptions& options);

// "decode_image: <source>: ", or "decode_image: " without a source: every error starts so.
std::string image_error_prefix(const std::string& source);

// DataError unless a stored height x width image is 1 to kMaxImagePixels pixels, checked from
// the header before any pixel memory is allocated.
void check_stored_size(int64_t height, int64_t width, const char* format,
                       const std::string& source);

// What decode_image hands a decoder: the encoded bytes (only read during the call), the
// channels asked for, and the source its errors name.
struct EncodedImage {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int64_t channels = 0;  // requested; 0 = as stored
  const std::string* source = nullptr;
};

// The decoders return interleaved pixels [H, W, C] (the order libpng and libjpeg write),
// C = the channels asked for or, if 0, the stored count (1 or 3). decode_image makes them
// channels first.
at::Tensor decode_png_hwc(const EncodedImage& encoded);
at::Tensor decode_jpeg_hwc(const EncodedImage& encoded);

// ITU-R BT.601 luma with libjpeg's fixed-point weights (FIX(0.299), FIX(0.587), FIX(0.114)
// at 16 bits, rounded), as libjpeg's encoder and PIL's convert("L") compute it.
inline uint8_t grey_of(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
}

// [H, W, 3] RGB pixels to a new [H, W, 1] grey tensor.
at::Tensor grey_from_rgb(const at::Tensor& rgb_hwc);

}  // namespace dist::data::detail
