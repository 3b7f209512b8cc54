// Encoded images (PNG through libpng, JPEG through libjpeg-turbo) decoded into uint8 tensors
// [C, H, W], C = 1 (grey) or 3 (RGB), converted and resized as PIL and torchvision do; and
// their encoding (encode_png, encode_jpeg). Bad data is a
// DataError starting "decode_image: <source>: " with the reason; nothing is printed; every
// function is thread-safe.
//
//   auto image = dist::data::decode_image(bytes.data(), bytes.size(), {3, 224, 224},
//                                         "record 12 of shard-00003.tfrecord");
//
// Pixel conventions (alpha, grey, 16-bit, CMYK) and the errors in full: docs/guide.md,
// "Decoding: the pixels of PIL".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace dist::data {

// The largest image decode_image accepts, in pixels (height * width): 2^28, a 16384 x 16384
// image (768 MiB as RGB). Larger sizes in a header are taken as corruption, not allocated.
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

struct DecodeImageOptions {
  // 0: as stored (grey and grey+alpha give 1, colour and palette give 3);
  // 1: grey; 3: RGB. Anything else is InvalidArgument.
  int64_t channels = 0;
  // 0 and 0: the stored size. Both positive: the image is resized to height x width by
  // resize_image (below). One set without the other is InvalidArgument.
  int64_t height = 0;
  int64_t width = 0;
  // The resize_image method: antialiased as PIL and torchvision (default) or TensorFlow's
  // plain bilinear (false).
  bool antialias = true;
};

// Decodes the PNG or JPEG image in data[0, size), whose format is told by its first bytes
// (PNG: 89 50 4E 47 0D 0A 1A 0A, JPEG: FF D8 FF), into a new contiguous uint8 tensor
// [C, H, W] as described above. `source` names the bytes in error messages, e.g. a file name
// or "record 12 of shard-00003.tfrecord". `data` is only read during the call.
at::Tensor decode_image(const uint8_t* data, size_t size, const DecodeImageOptions& options = {},
                        const std::string& source = "");

// The same for a 1-D uint8 CPU tensor of the encoded bytes.
at::Tensor decode_image(const at::Tensor& encoded, const DecodeImageOptions& options = {},
                        const std::string& source = "");

// Resizes an image [C, H, W], uint8 or floating, to [C, height, width] by bilinear
// interpolation with half-pixel centres (align_corners=false). Same dtype out as in.
//
// antialias = true (the default): PIL's Image.resize(BILINEAR), which torchvision's Resize
// computes on PIL images and on tensors with antialias=True. A separable triangle filter:
// output pixel i of an axis scaled by s = in / out is centred at input coordinate
// (i + 0.5) * s and weighs the input pixels j whose centres j + 0.5 lie within
// max(s, 1) of it by 1 - |j + 0.5 - centre| / max(s, 1), normalised to sum 1 (taps beyond
// the edge are dropped). Downscaling thus averages every input pixel; upscaling is plain
// bilinear. The horizontal pass (each row to the new width) runs first, then the vertical;
// uint8 images are rounded to uint8 after each pass, as PIL does: the pixels equal PIL's (0
// grey levels off in every case of tests/data/image_transforms_test.cc) and are within 1 grey
// level of torchvision's tensor resize(antialias=True), which works in float.
//
// antialias = false: tf.image.resize(method="bilinear") without antialiasing: each output
// pixel interpolates the 2x2 input pixels around (i + 0.5) * s - 0.5 (clamped at the edges),
// so downscaling by more than 2 skips pixels. Computed in float by ATen's
// upsample_bilinear2d; uint8 is rounded to the nearest integer (halves to even, as torch.round
// and tf.round). Kept for data prepared by TensorFlow.
//
// Returns a new contiguous tensor, also when the size is unchanged (the pixels are then
// equal). The image may be a strided view (a crop from narrow()): it is read in place.
// InvalidArgument for another shape or dtype, an image without pixels, sizes below 1, or more
// than kMaxImagePixels output pixels.
at::Tensor resize_image(const at::Tensor& image, int64_t height, int64_t width,
                        bool antialias = true);

// The JPEG file's bytes (baseline, 4:2:0 chroma subsampling for RGB, libjpeg's standard
// quantisation tables scaled to `quality`) for a uint8 image [H, W], [1, H, W] or [3, H, W].
// InvalidArgument for another shape or dtype, a side of 0 or above 65500 (JPEG's limit), or a
// quality outside 1..100.
std::string encode_jpeg(const at::Tensor& image, int quality = 95);

// The PNG file's bytes (8 bits per channel, not interlaced, sRGB, by libpng) for a uint8 image
// [H, W] (grey) or [C, H, W] with C = 1 (grey), 3 (RGB) or 4 (RGBA). InvalidArgument naming the
// shape or dtype and what is accepted, or if a side is zero (PNG has no empty images).
std::string encode_png(const at::Tensor& image);

}  // namespace dist::data
