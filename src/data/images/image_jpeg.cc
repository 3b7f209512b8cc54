// JPEG decoding and encoding with libjpeg (libjpeg-turbo's libjpeg 6b API), in memory.
//
// Errors: libjpeg's default error_exit prints the message and exits the process. Ours formats
// the message and longjmps back to the setjmp in read_jpeg or write_jpeg (libjpeg's documented
// way, example.c); only libjpeg's C frames and that function's are crossed, and it holds no
// object with a destructor. Warnings come through emit_message with level -1: those that mean
// pixels are missing or made up take the same path (see kPixelLosingWarnings), the others are
// ignored; nothing is printed.
//
// This file is kept out of the unity build (CMakeLists.txt): jpeglib.h defines macros such as
// TRUE, FALSE, LOCAL(), GLOBAL() and EXTERN() that must not reach the sources after it.
#include <ATen/ATen.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstdlib>

#include <jpeglib.h>
// After jpeglib.h: the warning codes depend on its configuration macros.
#include <jerror.h>

#include "data/images/image_codec_detail.h"
#include "dist/core/error.h"
#include "dist/data/image_codec.h"

namespace dist::data {
namespace {

// Warnings after which libjpeg goes on with grey or garbage pixels: the file ended early, a
// data segment ended early, an entropy-coded value was impossible, or a restart marker was
// lost. Such an image must be reported, not trained on.
constexpr int kPixelLosingWarnings[] = {JWRN_JPEG_EOF, JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE,
                                        JWRN_ARITH_BAD_CODE, JWRN_MUST_RESYNC};

struct JpegErrors {
  jpeg_error_mgr manager;  // first, so that cinfo->err points at the whole struct
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
};

[[noreturn]] void on_jpeg_error(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level != -1) return;  // trace messages
  for (int code : kPixelLosingWarnings)
    if (cinfo->err->msg_code == code) on_jpeg_error(cinfo);
}

void on_jpeg_output(j_common_ptr) {}

// Points cinfo's error handling at `errors`.
jpeg_error_mgr* install(JpegErrors* errors) {
  jpeg_error_mgr* manager = jpeg_std_error(&errors->manager);
  manager->error_exit = on_jpeg_error;
  manager->emit_message = on_jpeg_message;
  manager->output_message = on_jpeg_output;
  return manager;
}

// ---- decoding ----

struct JpegRead : detail::EncodedImage {
  bool cmyk = false;  // pixels are C, M, Y, K (Adobe's inverted values if adobe)
  bool adobe = false;
  at::Tensor pixels{};  // [H, W, C] as libjpeg writes them
};

// Chooses libjpeg's output colour space after the header is read: grey straight from the luma,
// RGB (grey replicated when the file is grey), or CMYK to be converted here.
J_COLOR_SPACE choose_output(jpeg_decompress_struct* cinfo, JpegRead* read) {
  const J_COLOR_SPACE stored = cinfo->jpeg_color_space;
  read->cmyk = stored == JCS_CMYK || stored == JCS_YCCK;
  read->adobe = cinfo->saw_Adobe_marker != 0;
  if (read->cmyk) return JCS_CMYK;
  const int64_t channels = read->channels != 0 ? read->channels : stored == JCS_GRAYSCALE ? 1 : 3;
  return channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
}

// Decodes into read->pixels; false (message in errors->message) if libjpeg failed.
bool read_jpeg(jpeg_decompress_struct* cinfo, JpegErrors* errors, JpegRead* read) {
  if (setjmp(errors->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, read->data, static_cast<unsigned long>(read->size));
  jpeg_read_header(cinfo, /*require_image=*/TRUE);
  detail::check_stored_size(cinfo->image_height, cinfo->image_width, "JPEG", *read->source);
  cinfo->out_color_space = choose_output(cinfo, read);
  // The defaults stay: JDCT_ISLOW and fancy upsampling, as PIL and torchvision decode.
  jpeg_start_decompress(cinfo);
  const int64_t height = cinfo->output_height, width = cinfo->output_width;
  const int64_t channels = cinfo->output_components;
  read->pixels = at::empty({height, width, channels}, at::kByte);
  uint8_t* base = read->pixels.data_ptr<uint8_t>();
  JSAMPROW rows[16];
  while (cinfo->output_scanline < cinfo->output_height) {
    const int64_t first = cinfo->output_scanline;
    const int64_t count = std::min<int64_t>(16, height - first);
    for (int64_t i = 0; i < count; ++i) rows[i] = base + (first + i) * width * channels;
    jpeg_read_scanlines(cinfo, rows, static_cast<JDIMENSION>(count));
  }
  // Reads up to EOI, so that a file cut after its last scan is still reported.
  jpeg_finish_decompress(cinfo);
  return true;
}

// CMYK pixels [H, W, 4] to RGB [H, W, 3]: R = (255 - C)(255 - K) / 255, rounded; Adobe's files
// store 255 - C and 255 - K, so there R = C * K / 255 (what TensorFlow computes).
at::Tensor rgb_from_cmyk(const at::Tensor& cmyk, bool adobe) {
  at::Tensor rgb = at::empty({cmyk.size(0), cmyk.size(1), 3}, at::kByte);
  const uint8_t* in = cmyk.data_ptr<uint8_t>();
  uint8_t* out = rgb.data_ptr<uint8_t>();
  const unsigned flip = adobe ? 0 : 255;
  for (int64_t i = 0, n = cmyk.size(0) * cmyk.size(1); i < n; ++i, in += 4, out += 3) {
    const unsigned k = in[3] ^ flip;
    for (int c = 0; c < 3; ++c) out[c] = static_cast<uint8_t>(((in[c] ^ flip) * k + 127) / 255);
  }
  return rgb;
}

// ---- encoding ----

struct JpegWrite {
  const uint8_t* pixels = nullptr;  // [H, W, C] interleaved
  int64_t height = 0, width = 0, channels = 0;
  int quality = 0;
  unsigned char* buffer = nullptr;  // malloc'ed by jpeg_mem_dest; freed by the caller
  unsigned long size = 0;
};

// Encodes into write->buffer; false (message in errors->message) if libjpeg failed.
bool write_jpeg(jpeg_compress_struct* cinfo, JpegErrors* errors, JpegWrite* write) {
  if (setjmp(errors->jump)) return false;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, &write->buffer, &write->size);
  cinfo->image_width = static_cast<JDIMENSION>(write->width);
  cinfo->image_height = static_cast<JDIMENSION>(write->height);
  cinfo->input_components = static_cast<int>(write->channels);
  cinfo->in_color_space = write->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, write->quality, /*force_baseline=*/TRUE);
  jpeg_start_compress(cinfo, /*write_all_tables=*/TRUE);
  const size_t stride = static_cast<size_t>(write->width * write->channels);
  while (cinfo->next_scanline < cinfo->image_height) {
    // libjpeg only reads the rows; its API is not const-correct.
    JSAMPROW row = const_cast<uint8_t*>(write->pixels) + cinfo->next_scanline * stride;
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

namespace detail {

at::Tensor decode_jpeg_hwc(const EncodedImage& encoded) {
  JpegRead read{encoded};
  jpeg_decompress_struct cinfo{};  // zeroed, so destroying it is safe whatever happened
  JpegErrors errors;
  cinfo.err = install(&errors);
  struct Destroy {
    jpeg_decompress_struct* cinfo;
    ~Destroy() { jpeg_destroy_decompress(cinfo); }
  } destroy{&cinfo};
  if (!read_jpeg(&cinfo, &errors, &read))
    throw DataError(dist::detail::concat(image_error_prefix(*encoded.source),
                                         "corrupt or truncated JPEG image: ", errors.message));
  if (!read.cmyk) return read.pixels;
  const at::Tensor rgb = rgb_from_cmyk(read.pixels, read.adobe);
  return encoded.channels == 1 ? grey_from_rgb(rgb) : rgb;
}

}  // namespace detail

std::string encode_jpeg(const at::Tensor& image, int quality) {
  DIST_CHECK_ARG(
      image.defined() && image.scalar_type() == at::kByte &&
          (image.dim() == 2 || (image.dim() == 3 && (image.size(0) == 1 || image.size(0) == 3))),
      "encode_jpeg: the image must be uint8 [H, W], [1, H, W] (grey) or [3, H, W] "
      "(RGB), got ",
      image.defined() ? image.toString() : std::string("an undefined tensor"), " of shape ",
      image.defined() ? image.sizes() : at::IntArrayRef{},
      "; map float pixels with dist::to_uint8_image first");
  DIST_CHECK_ARG(quality >= 1 && quality <= 100, "encode_jpeg: quality must be 1 to 100, got ",
                 quality);
  const int64_t height = image.size(-2), width = image.size(-1);
  DIST_CHECK_ARG(
      height >= 1 && width >= 1 && height <= JPEG_MAX_DIMENSION && width <= JPEG_MAX_DIMENSION,
      "encode_jpeg: an image of shape ", image.sizes(), " is ", width, "x", height,
      " pixels; JPEG needs 1 to ", JPEG_MAX_DIMENSION, " on each side");
  const at::Tensor hwc =
      (image.dim() == 2 ? image.unsqueeze(0) : image).to(at::kCPU).permute({1, 2, 0}).contiguous();

  JpegWrite write;
  write.pixels = hwc.data_ptr<uint8_t>();
  write.height = height;
  write.width = width;
  write.channels = hwc.size(2);
  write.quality = quality;
  jpeg_compress_struct cinfo{};
  JpegErrors errors;
  cinfo.err = install(&errors);
  struct Destroy {
    jpeg_compress_struct* cinfo;
    unsigned char** buffer;
    ~Destroy() {
      jpeg_destroy_compress(cinfo);
      std::free(*buffer);
    }
  } destroy{&cinfo, &write.buffer};
  if (!write_jpeg(&cinfo, &errors, &write))
    throw InvalidArgument(
        dist::detail::concat("encode_jpeg: libjpeg cannot encode the image of "
                             "shape ",
                             image.sizes(), ": ", errors.message));
  return std::string(reinterpret_cast<const char*>(write.buffer), write.size);
}

}  // namespace dist::data
