// decode_image: the format told by the magic bytes, the options checked, the decoders' [H,W,C]
// pixels made channels first and resized.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>

#include "data/images/image_codec_detail.h"
#include "dist/core/error.h"
#include "dist/data/image_codec.h"

namespace dist::data {
namespace {

constexpr uint8_t kPngMagic[] = {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A};
constexpr uint8_t kJpegMagic[] = {0xFF, 0xD8, 0xFF};

template <size_t N>
bool has_magic(const uint8_t* data, size_t size, const uint8_t (&magic)[N]) {
  return size >= N && std::memcmp(data, magic, N) == 0;
}

// "it starts with bytes 12 34 56 78" (at most 8 bytes), or "it is empty".
std::string describe_start(const uint8_t* data, size_t size) {
  if (size == 0) return "it is empty";
  std::string text = "it starts with bytes";
  char hex[4];
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    std::snprintf(hex, sizeof hex, " %02x", data[i]);
    text += hex;
  }
  return text;
}

}  // namespace

namespace detail {

void check_decode_options(const DecodeImageOptions& options) {
  DIST_CHECK_ARG(options.channels == 0 || options.channels == 1 || options.channels == 3,
                 "decode_image: channels must be 0 (as stored), 1 (grey) or 3 (RGB), got ",
                 options.channels);
  DIST_CHECK_ARG(
      options.height >= 0 && options.width >= 0 && (options.height == 0) == (options.width == 0),
      "decode_image: height and width must both be 0 (keep the stored size) or both "
      "positive (resize), got height ",
      options.height, " and width ", options.width);
  DIST_CHECK_ARG(options.height == 0 || options.height <= kMaxImagePixels / options.width,
                 "decode_image: resizing to ", options.height, "x", options.width,
                 " would make more than kMaxImagePixels (", kMaxImagePixels, ") pixels");
}

std::string image_error_prefix(const std::string& source) {
  return source.empty() ? std::string("decode_image: ") : "decode_image: " + source + ": ";
}

void check_stored_size(int64_t height, int64_t width, const char* format,
                       const std::string& source) {
  DIST_CHECK(height > 0 && width > 0 && height <= kMaxImagePixels / width, DataError,
             image_error_prefix(source), "the ", format, " header says the image is ", width, "x",
             height, " pixels; accepted are 1 to kMaxImagePixels (", kMaxImagePixels,
             ") pixels, so the data is corrupt or not meant to be decoded whole");
}

at::Tensor grey_from_rgb(const at::Tensor& rgb_hwc) {
  at::Tensor grey = at::empty({rgb_hwc.size(0), rgb_hwc.size(1), 1}, at::kByte);
  const uint8_t* in = rgb_hwc.data_ptr<uint8_t>();
  uint8_t* out = grey.data_ptr<uint8_t>();
  for (int64_t i = 0, n = grey.numel(); i < n; ++i, in += 3) out[i] = grey_of(in[0], in[1], in[2]);
  return grey;
}

}  // namespace detail

at::Tensor decode_image(const uint8_t* data, size_t size, const DecodeImageOptions& options,
                        const std::string& source) {
  detail::check_decode_options(options);
  DIST_CHECK_ARG(data != nullptr || size == 0, "decode_image: data is null but size is ", size);
  at::Tensor hwc;
  if (has_magic(data, size, kPngMagic)) {
    hwc = detail::decode_png_hwc({data, size, options.channels, &source});
  } else if (has_magic(data, size, kJpegMagic)) {
    hwc = detail::decode_jpeg_hwc({data, size, options.channels, &source});
  } else {
    throw DataError(dist::detail::concat(detail::image_error_prefix(source),
                                         "not a PNG or JPEG image (", describe_start(data, size),
                                         "); only PNG and JPEG are decoded"));
  }
  const int64_t height = hwc.size(0), width = hwc.size(1), channels = hwc.size(2);
  const at::Tensor chw = channels == 1 ? hwc.view({1, height, width}) : hwc.permute({2, 0, 1});
  // resize_image reads the channels-first view in place: no copy before resizing.
  if (options.height > 0 && (options.height != height || options.width != width))
    return resize_image(chw, options.height, options.width, options.antialias);
  return chw.contiguous();
}

at::Tensor decode_image(const at::Tensor& encoded, const DecodeImageOptions& options,
                        const std::string& source) {
  DIST_CHECK_ARG(encoded.defined() && encoded.dim() == 1 && encoded.scalar_type() == at::kByte &&
                     encoded.device().is_cpu(),
                 "decode_image: the encoded bytes must be a 1-D uint8 CPU tensor, got ",
                 encoded.defined() ? encoded.toString() : std::string("an undefined tensor"),
                 " of shape ", encoded.defined() ? encoded.sizes() : at::IntArrayRef{});
  const at::Tensor bytes = encoded.contiguous();
  return decode_image(bytes.data_ptr<uint8_t>(), static_cast<size_t>(bytes.numel()), options,
                      source);
}

}  // namespace dist::data
