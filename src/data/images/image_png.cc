// PNG decoding with libpng's progressive-free reading API (png_read_info, png_read_row,
// png_read_end), from memory; and PNG encoding (encode_png, at the end).
//
// Errors: libpng reports them by calling an error callback that must not return. Ours records
// the message and longjmps back to the setjmp in read_png, libpng's documented way; the
// longjmp only crosses libpng's C frames and read_png's, which holds no object with a
// destructor (everything that must outlive an error lives in the caller's PngRead). The
// caller then throws a DataError with libpng's message. Warnings are dropped (libpng would
// print them to stderr): they concern ancillary chunks, never the pixels.
#include <png.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>

#include "data/images/image_codec_detail.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// What the callbacks and read_png share with decode_png_hwc.
struct PngRead : EncodedImage {
  size_t offset = 0;
  at::Tensor pixels{};  // [H, W, C] as libpng writes them (C = 3 when grey is made from RGB)
  char message[200] = "";
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* read = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(read->message, sizeof read->message, "%s", message);
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void read_png_bytes(png_structp png, png_bytep out, png_size_t length) {
  auto* read = static_cast<PngRead*>(png_get_io_ptr(png));
  if (length > read->size - read->offset)
    png_error(png, "the data ends early (the file is truncated)");
  std::memcpy(out, read->data + read->offset, length);
  read->offset += length;
}

// Asks libpng for 8-bit grey or RGB without alpha; returns the channel count it will write.
int request_8bit_pixels(png_structp png, png_infop info, int64_t requested) {
  const int color_type = png_get_color_type(png, info);
  const bool grey = (color_type & PNG_COLOR_MASK_COLOR) == 0;
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (grey && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_bit_depth(png, info) == 16) png_set_scale_16(png);
  // png_set_palette_to_rgb also expands tRNS to an alpha channel: stripped here with the rest.
  png_set_strip_alpha(png);
  if (grey && requested == 3) png_set_gray_to_rgb(png);
  return grey && requested != 3 ? 1 : 3;
}

// Decodes into read->pixels; false (message in read->message) if libpng failed.
bool read_png(png_structp png, png_infop info, PngRead* read) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int64_t height = png_get_image_height(png, info), width = png_get_image_width(png, info);
  check_stored_size(height, width, "PNG", *read->source);
  const int channels = request_8bit_pixels(png, info, read->channels);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  DIST_INTERNAL_ASSERT(png_get_channels(png, info) == channels && png_get_bit_depth(png, info) == 8,
                       "libpng writes ", int{png_get_channels(png, info)}, " channels of ",
                       int{png_get_bit_depth(png, info)}, " bits, expected ", channels, " of 8");
  read->pixels = at::empty({height, width, channels}, at::kByte);
  uint8_t* base = read->pixels.data_ptr<uint8_t>();
  const size_t stride = static_cast<size_t>(width) * channels;
  for (int pass = 0; pass < passes; ++pass)
    for (int64_t y = 0; y < height; ++y) png_read_row(png, base + y * stride, nullptr);
  // Reads the rest up to IEND, so that a file cut after its last row is still reported.
  png_read_end(png, nullptr);
  return true;
}

}  // namespace

at::Tensor decode_png_hwc(const EncodedImage& encoded) {
  PngRead read{encoded};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &read, on_png_error, on_png_warning);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  struct Destroy {
    png_structp* png;
    png_infop* info;
    ~Destroy() { png_destroy_read_struct(png, info, nullptr); }
  } destroy{&png, &info};
  DIST_CHECK(info != nullptr, DataError, image_error_prefix(*encoded.source),
             "libpng cannot start decoding (out of memory)");
  png_set_read_fn(png, &read, read_png_bytes);
  if (!read_png(png, info, &read))
    throw DataError(dist::detail::concat(image_error_prefix(*encoded.source),
                                         "corrupt or truncated PNG image: ", read.message));
  if (encoded.channels == 1 && read.pixels.size(2) == 3) return grey_from_rgb(read.pixels);
  return read.pixels;
}

}  // namespace dist::data::detail

// ---- encoding, with libpng's simplified write API ----

namespace dist::data {
namespace {

constexpr const char* kAcceptedShapes =
    "[H,W] (grey) or [C,H,W] with C = 1 (grey), 3 (RGB), 4 (RGBA)";

// Checks what encode_png accepts; returns the channel count.
int64_t check_png_image(const at::Tensor& image) {
  DIST_CHECK_ARG(image.defined(), "encode_png: the image tensor is undefined");
  DIST_CHECK_ARG(image.dim() == 2 || image.dim() == 3, "encode_png: an image of shape ",
                 image.sizes(), " has ", image.dim(), " dimensions; accepted: ", kAcceptedShapes,
                 " (for a batch [N,C,H,W], tile it with image_grid first)");
  const int64_t channels = image.dim() == 2 ? 1 : image.size(0);
  DIST_CHECK_ARG(channels == 1 || channels == 3 || channels == 4, "encode_png: an image of shape ",
                 image.sizes(), " has ", channels, " channels; accepted: ", kAcceptedShapes,
                 " (channels first)");
  DIST_CHECK_ARG(image.scalar_type() == at::kByte, "encode_png: the image of shape ", image.sizes(),
                 " is ", image.scalar_type(),
                 "; PNG takes uint8 pixels: map values with to_uint8_image(image, low, high) "
                 "first");
  const int64_t height = image.size(-2), width = image.size(-1);
  // PNG's limit on each side is 2^31 - 1; libpng reports its own, lower, limits below.
  constexpr int64_t kMaxSide = 0x7fffffff;
  DIST_CHECK_ARG(height > 0 && width > 0 && height <= kMaxSide && width <= kMaxSide,
                 "encode_png: an image of shape ", image.sizes(), " is ", height, "x", width,
                 " pixels; PNG needs 1 to ", kMaxSide, " on each side");
  return channels;
}

}  // namespace

std::string encode_png(const at::Tensor& image) {
  const int64_t channels = check_png_image(image);
  // libpng takes interleaved rows: [H,W,C].
  const at::Tensor pixels =
      (image.dim() == 2 ? image.unsqueeze(0) : image).to(at::kCPU).permute({1, 2, 0}).contiguous();

  // libpng's simplified API: it does its own setjmp/longjmp error handling and reports failure
  // through its return value and png_image::message, so no C++ frame is jumped over.
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.size(-1));
  png.height = static_cast<png_uint_32>(image.size(-2));
  png.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  // An upper bound, so one compression pass suffices; if zlib ever needs more, libpng says how
  // much and the second attempt uses that.
  std::string bytes(PNG_IMAGE_PNG_SIZE_MAX(png), '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    png_alloc_size_t size = bytes.size();
    if (png_image_write_to_memory(&png, bytes.data(), &size, /*convert_to_8_bit=*/0,
                                  pixels.data_ptr(), /*row_stride=*/0, /*colormap=*/nullptr)) {
      bytes.resize(size);
      return bytes;
    }
    if (size <= bytes.size()) break;  // an error, not a short buffer
    bytes.assign(size, '\0');
  }
  throw InvalidArgument(dist::detail::concat("encode_png: libpng cannot encode the image of shape ",
                                             image.sizes(), ": ", png.message));
}

}  // namespace dist::data
