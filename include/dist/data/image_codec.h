// Encoded images (PNG through libpng, JPEG through libjpeg-turbo) decoded into uint8 tensors,
// channels first, optionally converted to grey or RGB and resized (antialiased, as PIL); and
// JPEG encoding, for tests and for converting data sets (PNG encoding is dist::encode_png in
// dist/train/image_io.h).
//
//   // One TFRecord example's image bytes to a [3, 224, 224] uint8 tensor:
//   auto image = dist::data::decode_image(bytes.data(), bytes.size(), {3, 224, 224},
//                                         "record 12 of shard-00003.tfrecord");
//
// Pixels. The result is a contiguous uint8 tensor [C, H, W] with C = 1 (grey) or 3 (RGB).
//   - Alpha is dropped, never composited onto a background (as PIL's convert("RGB") and
//     tf.io.decode_png(channels=3)); a PNG's tRNS transparency is ignored the same way.
//   - RGB to grey uses the ITU-R BT.601 weights with libjpeg's fixed-point arithmetic:
//     (19595 R + 38470 G + 7471 B + 32768) >> 16, the conversion of libjpeg's encoder and of
//     PIL's convert("L"). A colour JPEG asked for grey is decoded straight to grey: libjpeg
//     outputs its luma (Y), the same weights applied before compression. (libpng's own
//     png_set_rgb_to_gray defaults to BT.709 weights in linear light, so it is not used.)
//   - Grey to RGB replicates the grey value.
//   - 16-bit PNG samples become 8-bit by png_set_scale_16: round(v * 255 / 65535). PIL and
//     png_set_strip_16 keep the high byte instead, which is lower by at most 1.
//   - Palette PNGs are expanded to RGB; grey PNGs of 1, 2 or 4 bits are scaled to 0..255;
//     interlaced PNGs are deinterlaced.
//   - JPEG uses libjpeg's defaults (the accurate integer DCT, JDCT_ISLOW, and smooth "fancy"
//     chroma upsampling), which PIL and torchvision use, so pixels match theirs. CMYK and YCCK
//     JPEGs (Adobe's inverted convention) become RGB by R = C * K / 255, as TensorFlow does.
//
// Errors. Bad data (not a PNG or JPEG, truncated, corrupt, 0 or more than kMaxImagePixels
// pixels) is a dist::DataError whose message starts with "decode_image: " and the source
// (when one is given), then the reason, libpng's or libjpeg's own message included. A JPEG
// that libjpeg would only warn about in a way that means pixels are lost (premature end of
// file, premature end of a data segment, bad Huffman code, lost synchronisation) is an error
// too: libjpeg fills the missing part with grey, and a truncated image must be reported, not
// trained on. Harmless warnings (extraneous bytes before a marker, which PIL and TensorFlow
// accept) are ignored. Bad arguments are dist::InvalidArgument. Nothing is printed.
//
// Thread safety: every function is thread-safe (no shared state).
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

}  // namespace dist::data
