// decode_image, resize_image and encode_jpeg. PNG files come from dist::encode_png and from
// libpng's writer driven directly here (palette, tRNS, 1- to 16-bit, interlaced), so the
// expected pixels are exact; JPEG files from encode_jpeg and from libjpeg directly (CMYK), with
// lossy bounds. Truncation at every cut point must be a DataError naming the source.
#include <gtest/gtest.h>
#include <png.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "dist/core/error.h"
#include "dist/data/image_codec.h"
#include "dist/train/image_io.h"
#include "expect_error.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::message_of;

at::Tensor decode(const std::string& bytes, const DecodeImageOptions& options = {},
                  const std::string& source = "") {
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options,
                      source);
}

using testing::expect_contains;

at::Tensor random_image(std::vector<int64_t> shape, int64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, shape, torch::kLong).to(torch::kUInt8);
}

// The BT.601 grey of an RGB image [3,H,W] as [1,H,W], in libjpeg's fixed point.
at::Tensor expected_grey(const at::Tensor& rgb) {
  auto c = rgb.to(torch::kLong);
  return ((c[0] * 19595 + c[1] * 38470 + c[2] * 7471 + 32768) / 65536)
      .to(torch::kUInt8)
      .unsqueeze(0);
}

int64_t max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kLong) - b.to(torch::kLong)).abs().max().item<int64_t>();
}

// ---- PNG files written by libpng directly ----

struct RawPng {
  uint32_t width = 0, height = 0;
  int bit_depth = 8, color_type = PNG_COLOR_TYPE_GRAY;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<uint8_t> palette_alpha;  // tRNS of a palette image
  std::vector<std::string> rows;       // packed, 16-bit samples big-endian
};

void append_bytes(png_structp png, png_bytep data, png_size_t length) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), length);
}

std::string write_raw_png(const RawPng& raw) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::string bytes;
  png_set_write_fn(png, &bytes, append_bytes, nullptr);
  png_set_IHDR(png, info, raw.width, raw.height, raw.bit_depth, raw.color_type,
               raw.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!raw.palette.empty())
    png_set_PLTE(png, info, raw.palette.data(), static_cast<int>(raw.palette.size()));
  if (!raw.palette_alpha.empty())
    png_set_tRNS(png, info, raw.palette_alpha.data(), static_cast<int>(raw.palette_alpha.size()),
                 nullptr);
  png_write_info(png, info);
  std::vector<png_bytep> rows;
  for (const auto& row : raw.rows)
    rows.push_back(reinterpret_cast<png_bytep>(const_cast<char*>(row.data())));
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return bytes;
}

std::string bytes_of(std::initializer_list<int> values) {
  std::string text;
  for (int v : values) text.push_back(static_cast<char>(v));
  return text;
}

// A big-endian 32-bit value at `at`.
void put_be32(std::string& bytes, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(value >> (24 - 8 * i));
}

// A copy of the PNG with IHDR's size replaced and its CRC fixed, so only the size is wrong.
std::string with_png_size(std::string png, uint32_t width, uint32_t height) {
  put_be32(png, 16, width);
  put_be32(png, 20, height);
  const uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  put_be32(png, 29, crc);
  return png;
}

TEST(ImageCodecTest, PngRoundTripsAreExact) {
  int64_t seed = 0;
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{1, 5, 7}, {3, 5, 7}, {4, 6, 3}, {1, 1, 1}, {3, 1, 13}, {3, 33, 31}}) {
    const at::Tensor image = random_image(shape, ++seed);
    const at::Tensor decoded = decode(encode_png(image));
    const at::Tensor rgb_or_grey = image.narrow(0, 0, std::min<int64_t>(image.size(0), 3));
    EXPECT_TRUE(decoded.is_contiguous());
    EXPECT_EQ(decoded.scalar_type(), torch::kUInt8);
    EXPECT_TRUE(torch::equal(decoded, rgb_or_grey)) << "shape " << image.sizes();
  }
  const at::Tensor grey_hw = random_image({9, 4}, 7);
  EXPECT_TRUE(torch::equal(decode(encode_png(grey_hw)), grey_hw.unsqueeze(0)));
}

TEST(ImageCodecTest, PngChannelConversions) {
  const at::Tensor rgb = random_image({3, 8, 11}, 1), grey = random_image({1, 8, 11}, 2);
  EXPECT_TRUE(torch::equal(decode(encode_png(rgb), {1}), expected_grey(rgb)));
  EXPECT_TRUE(torch::equal(decode(encode_png(rgb), {3}), rgb));
  EXPECT_TRUE(torch::equal(decode(encode_png(grey), {3}), grey.expand({3, 8, 11})));
  EXPECT_TRUE(torch::equal(decode(encode_png(grey), {1}), grey));
  // Alpha is dropped, not composited.
  const at::Tensor rgba = random_image({4, 8, 11}, 3);
  EXPECT_TRUE(torch::equal(decode(encode_png(rgba), {1}), expected_grey(rgba.narrow(0, 0, 3))));
  // The tensor overload decodes the same bytes.
  const std::string bytes = encode_png(rgb);
  const at::Tensor encoded = torch::from_blob(const_cast<char*>(bytes.data()),
                                              {static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  EXPECT_TRUE(torch::equal(decode_image(encoded, {}, "x"), rgb));
}

TEST(ImageCodecTest, PalettePngWithTransparencyDecodesToItsColours) {
  RawPng raw;
  raw.width = 4;
  raw.height = 2;
  raw.bit_depth = 2;
  raw.color_type = PNG_COLOR_TYPE_PALETTE;
  raw.palette = {{10, 20, 30}, {200, 100, 0}, {0, 255, 7}, {90, 90, 90}};
  raw.palette_alpha = {0, 128};  // ignored: alpha is dropped
  // Indices 0 1 2 3 / 3 2 1 0, four 2-bit indices per byte.
  raw.rows = {bytes_of({0b00011011}), bytes_of({0b11100100})};
  const std::string png = write_raw_png(raw);
  const at::Tensor expected = torch::tensor({10, 200, 0,   90, 90, 0, 200, 10, 20, 100, 255, 90,
                                             90, 255, 100, 20, 30, 0, 7,   90, 90, 7,   0,   30},
                                            torch::kUInt8)
                                  .reshape({3, 2, 4});
  EXPECT_TRUE(torch::equal(decode(png), expected)) << decode(png);
  EXPECT_TRUE(torch::equal(decode(png, {1}), expected_grey(expected)));
}

TEST(ImageCodecTest, SixteenBitPngIsScaledToEightBits) {
  RawPng raw;
  raw.width = 5;
  raw.height = 1;
  raw.bit_depth = 16;
  // 0, 511, 0x7fff, 65535, 257 * 100: round(v * 255 / 65535) = 0, 2, 127, 255, 100 (the high
  // byte would give 1 for 511).
  raw.rows = {bytes_of({0, 0, 0x01, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x64, 0x64})};
  EXPECT_TRUE(torch::equal(decode(write_raw_png(raw)),
                           torch::tensor({0, 2, 127, 255, 100}, torch::kUInt8).reshape({1, 1, 5})));

  raw.width = 1;
  raw.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  raw.rows = {bytes_of({0xff, 0xff, 0x01, 0xff, 0x64, 0x64, 0x12, 0x34})};
  EXPECT_TRUE(torch::equal(decode(write_raw_png(raw)),
                           torch::tensor({255, 2, 100}, torch::kUInt8).reshape({3, 1, 1})));
}

TEST(ImageCodecTest, LowBitDepthGreyPngIsScaledToFullRange) {
  RawPng raw;
  raw.width = 4;
  raw.height = 1;
  raw.bit_depth = 2;
  raw.rows = {bytes_of({0b00011011})};
  EXPECT_TRUE(torch::equal(decode(write_raw_png(raw)),
                           torch::tensor({0, 85, 170, 255}, torch::kUInt8).reshape({1, 1, 4})));
  raw.width = 9;
  raw.bit_depth = 1;
  raw.rows = {bytes_of({0b10100000, 0b10000000})};
  EXPECT_TRUE(torch::equal(decode(write_raw_png(raw), {3}),
                           torch::tensor({255, 0, 255, 0, 0, 0, 0, 0, 255}, torch::kUInt8)
                               .reshape({1, 1, 9})
                               .expand({3, 1, 9})));
}

TEST(ImageCodecTest, InterlacedPngDecodesLikeAPlainOne) {
  const at::Tensor image = random_image({3, 13, 11}, 5);
  const at::Tensor hwc = image.permute({1, 2, 0}).contiguous();
  RawPng raw;
  raw.width = 11;
  raw.height = 13;
  raw.color_type = PNG_COLOR_TYPE_RGB;
  raw.interlaced = true;
  for (int64_t y = 0; y < 13; ++y)
    raw.rows.emplace_back(reinterpret_cast<const char*>(hwc[y].data_ptr<uint8_t>()), 33);
  const std::string png = write_raw_png(raw);
  ASSERT_EQ(png[28], 1);  // IHDR's interlace method: Adam7
  EXPECT_TRUE(torch::equal(decode(png), image));
}

// ---- JPEG ----

// Smooth gradients: what JPEG keeps well.
at::Tensor smooth_rgb(int64_t height, int64_t width) {
  auto y = torch::arange(height).unsqueeze(1).expand({height, width});
  auto x = torch::arange(width).unsqueeze(0).expand({height, width});
  return torch::stack({40 + 2 * x, 60 + 2 * y, 128 + x - y}).to(torch::kUInt8);
}

TEST(ImageCodecTest, JpegRoundTripIsCloseAtQuality95) {
  const at::Tensor rgb = smooth_rgb(64, 48);
  const std::string jpeg = encode_jpeg(rgb, 95);
  ASSERT_EQ(jpeg.substr(0, 3), bytes_of({0xff, 0xd8, 0xff}));
  const at::Tensor decoded = decode(jpeg);
  ASSERT_EQ(decoded.sizes(), rgb.sizes());
  EXPECT_LE(max_difference(decoded, rgb), 4);

  // Grey straight from the luma, within 1 of the grey of the decoded RGB.
  const at::Tensor grey = decode(jpeg, {1});
  ASSERT_EQ(grey.sizes(), (std::vector<int64_t>{1, 64, 48}));
  EXPECT_LE(max_difference(grey, expected_grey(decoded)), 1);
  EXPECT_LE(max_difference(grey, expected_grey(rgb)), 3);
}

TEST(ImageCodecTest, GreyJpegKeepsOneChannelOrIsReplicated) {
  const at::Tensor grey = smooth_rgb(20, 30)[1].unsqueeze(0).contiguous();
  for (const std::string& jpeg : {encode_jpeg(grey, 90), encode_jpeg(grey.squeeze(0), 90)}) {
    const at::Tensor decoded = decode(jpeg);
    ASSERT_EQ(decoded.sizes(), grey.sizes());
    EXPECT_LE(max_difference(decoded, grey), 2);
    EXPECT_TRUE(torch::equal(decode(jpeg, {3}), decoded.expand({3, 20, 30})));
  }
}

// A CMYK JPEG as Adobe's software writes it (libjpeg adds the Adobe marker, the values are
// stored inverted): pixels (C', M', Y', K') mean RGB (C' K' / 255, M' K' / 255, Y' K' / 255).
std::string cmyk_jpeg(const std::vector<uint8_t>& cmyk, int width, int height) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 100, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  for (int y = 0; y < height; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(cmyk.data()) + y * width * 4;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string bytes(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return bytes;
}

TEST(ImageCodecTest, AdobeCmykJpegBecomesRgb) {
  std::vector<uint8_t> pixels;
  for (int i = 0; i < 16 * 16; ++i) pixels.insert(pixels.end(), {200, 100, 50, 128});
  const std::string jpeg = cmyk_jpeg(pixels, 16, 16);
  const at::Tensor expected = torch::tensor({100, 50, 25}, torch::kUInt8).reshape({3, 1, 1});
  EXPECT_LE(max_difference(decode(jpeg), expected.expand({3, 16, 16})), 2);
  EXPECT_LE(max_difference(decode(jpeg, {1}), expected_grey(expected).expand({1, 16, 16})), 2);
}

// ---- damaged data ----

// Decodes every prefix of `file` shorter than the whole: each must throw a DataError naming
// the source, print nothing, and never return an image.
void expect_every_truncation_fails(const std::string& file, const std::string& format) {
  ::testing::internal::CaptureStderr();
  for (size_t cut = 0; cut < file.size(); ++cut) {
    const std::string source = "record " + std::to_string(cut) + " of shard-00003.tfrecord";
    const std::string message =
        message_of<DataError>([&] { decode(file.substr(0, cut), {}, source); });
    expect_contains(message, "decode_image: " + source + ": ");
    if (cut >= 8) expect_contains(message, "corrupt or truncated " + format + " image");
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(ImageCodecTest, TruncatedPngIsADataErrorAtEveryCut) {
  const std::string png = encode_png(random_image({3, 6, 5}, 9));
  expect_every_truncation_fails(png, "PNG");
  expect_contains(message_of<DataError>([&] { decode(png.substr(0, png.size() / 2)); }),
                  "the data ends early (the file is truncated)");
}

TEST(ImageCodecTest, TruncatedJpegIsADataErrorAtEveryCut) {
  const std::string jpeg = encode_jpeg(smooth_rgb(24, 17), 90);
  expect_every_truncation_fails(jpeg, "JPEG");
  // libjpeg's own default would only warn here and fill the rest with grey.
  expect_contains(message_of<DataError>([&] { decode(jpeg.substr(0, jpeg.size() * 3 / 4)); }),
                  "Premature end of JPEG file");
}

TEST(ImageCodecTest, CorruptPngChunkIsADataError) {
  std::string png = encode_png(random_image({3, 6, 5}, 10));
  png[png.size() - 20] ^= 0x55;  // inside IDAT: its CRC no longer matches
  expect_contains(message_of<DataError>([&] { decode(png, {}, "a.png"); }),
                  "decode_image: a.png: corrupt or truncated PNG image: ");
}

TEST(ImageCodecTest, CorruptJpegHeaderIsADataError) {
  std::string jpeg = encode_jpeg(smooth_rgb(8, 8));
  for (size_t i = 3; i < 40; ++i) jpeg[i] = static_cast<char>(0x11 * i);
  expect_contains(message_of<DataError>([&] { decode(jpeg, {}, "b.jpg"); }),
                  "decode_image: b.jpg: corrupt or truncated JPEG image: ");
}

TEST(ImageCodecTest, OtherBytesAreNotAnImage) {
  expect_contains(message_of<DataError>([] {
                    decode(bytes_of({0x12, 0x34, 0x56, 0x78}), {}, "r 1");
                  }),
                  "decode_image: r 1: not a PNG or JPEG image (it starts with bytes 12 34 56 78)");
  expect_contains(message_of<DataError>([] { decode("GIF89a and more bytes"); }),
                  "decode_image: not a PNG or JPEG image (it starts with bytes 47 49 46 38 39 61 "
                  "20 61)");
  expect_contains(message_of<DataError>([] { decode(""); }), "(it is empty)");
  for (int64_t seed = 0; seed < 20; ++seed) {
    const at::Tensor noise = random_image({100}, seed);
    std::string bytes(reinterpret_cast<const char*>(noise.data_ptr<uint8_t>()), 100);
    if (static_cast<uint8_t>(bytes[0]) == 0x89 || static_cast<uint8_t>(bytes[0]) == 0xff)
      bytes[0] = 0;
    expect_contains(message_of<DataError>([&] { decode(bytes); }), "not a PNG or JPEG image");
  }
}

TEST(ImageCodecTest, AbsurdOrEmptySizesAreDataErrors) {
  const std::string png = encode_png(random_image({1, 1, 1}, 11));
  ASSERT_TRUE(torch::equal(decode(with_png_size(png, 1, 1)), decode(png)));
  expect_contains(
      message_of<DataError>([&] { decode(with_png_size(png, 100000, 100000), {}, "c"); }),
      "decode_image: c: the PNG header says the image is 100000x100000 pixels");
  EXPECT_NE(message_of<DataError>([&] { decode(with_png_size(png, 0, 1)); }), "no exception");

  // The JPEG's SOF0 segment: FF C0, length, precision, height, width.
  std::string jpeg = encode_jpeg(smooth_rgb(8, 8));
  const size_t sof = jpeg.find(bytes_of({0xff, 0xc0}));
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = jpeg[sof + 7] = static_cast<char>(0xfd);  // 65000 x 65000
  jpeg[sof + 6] = jpeg[sof + 8] = static_cast<char>(0xe8);
  expect_contains(message_of<DataError>([&] { decode(jpeg, {}, "d"); }),
                  "decode_image: d: the JPEG header says the image is 65000x65000 pixels");
  jpeg[sof + 5] = jpeg[sof + 6] = 0;
  EXPECT_NE(message_of<DataError>([&] { decode(jpeg); }), "no exception");
}

// ---- resizing ----

TEST(ImageCodecTest, ResizeOfAConstantImageIsConstant) {
  const at::Tensor image = torch::full({3, 7, 5}, 77, torch::kUInt8);
  for (auto [h, w] : {std::pair<int64_t, int64_t>{13, 3}, {1, 1}, {7, 5}, {2, 40}})
    EXPECT_TRUE(torch::equal(resize_image(image, h, w), torch::full({3, h, w}, 77, torch::kUInt8)));
}

TEST(ImageCodecTest, ResizeWithoutAntialiasingMatchesHandComputedHalfPixelBilinear) {
  // Output i samples input coordinate (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped:
  // weights (1, 0), (0.75, 0.25), (0.25, 0.75), (0, 1) along each axis.
  const at::Tensor image = torch::tensor({0, 100, 200, 255}, torch::kUInt8).reshape({1, 2, 2});
  const at::Tensor expected = torch::tensor({0, 25, 75, 100,       //
                                             50, 72, 117, 139,     // 72.19 116.56 138.75
                                             150, 167, 200, 216,   // 166.56 199.69 216.25
                                             200, 214, 241, 255},  // 213.75 241.25
                                            torch::kUInt8)
                                  .reshape({1, 4, 4});
  EXPECT_TRUE(torch::equal(resize_image(image, 4, 4, false), expected))
      << resize_image(image, 4, 4, false);
  // Halves round to even: 0, 0.5, 1.5, 2.
  EXPECT_TRUE(torch::equal(
      resize_image(torch::tensor({0, 2}, torch::kUInt8).reshape({1, 1, 2}), 1, 4, false),
      torch::tensor({0, 0, 2, 2}, torch::kUInt8).reshape({1, 1, 4})));
  // Halving samples between each 2x2 block's pixels: their mean, here x.5, rounded to even.
  EXPECT_TRUE(torch::equal(
      resize_image(torch::arange(16).to(torch::kUInt8).reshape({1, 4, 4}), 2, 2, false),
      torch::tensor({2, 4, 10, 12}, torch::kUInt8).reshape({1, 2, 2})));
  // Float images are interpolated the same way, without rounding.
  EXPECT_TRUE(torch::allclose(resize_image(image.to(torch::kFloat), 4, 4, false)[0][1],
                              torch::tensor({50.0f, 72.1875f, 116.5625f, 138.75f})));
}

TEST(ImageCodecTest, AntialiasedResizeMatchesHandComputedTriangleFilter) {
  // Halving [0, 100, 200, 255]: output 0 is centred at input coordinate 1 and the filter's
  // half-width is 2, so inputs centred at 0.5, 1.5, 2.5 weigh 0.75, 0.75, 0.25 (normalised by
  // 1.75): 125 / 1.75 = 71.4; output 1, centred at 3: 0.25, 0.75, 0.75 on 100, 200, 255:
  // 366.25 / 1.75 = 209.3.
  const at::Tensor row = torch::tensor({0, 100, 200, 255}, torch::kUInt8).reshape({1, 1, 4});
  EXPECT_TRUE(torch::equal(resize_image(row, 1, 2),
                           torch::tensor({71, 209}, torch::kUInt8).reshape({1, 1, 2})))
      << resize_image(row, 1, 2);
  EXPECT_TRUE(torch::allclose(resize_image(row.to(torch::kFloat), 1, 2),
                              torch::tensor({125 / 1.75f, 366.25f / 1.75f}).reshape({1, 1, 2})));
  // The same along columns; every input pixel counts, unlike the 2-tap filter above.
  EXPECT_TRUE(torch::equal(resize_image(row.view({1, 4, 1}), 2, 1),
                           torch::tensor({71, 209}, torch::kUInt8).reshape({1, 2, 1})));
  // Upscaling is linear interpolation; halves round up as PIL's fixed point does: 0, 0.5,
  // 1.5, 2.
  EXPECT_TRUE(
      torch::equal(resize_image(torch::tensor({0, 2}, torch::kUInt8).reshape({1, 1, 2}), 1, 4),
                   torch::tensor({0, 1, 2, 2}, torch::kUInt8).reshape({1, 1, 4})));
  // A crop given as a view is read in place: the same pixels as from a copy.
  const at::Tensor image = random_image({3, 40, 50}, 21);
  const at::Tensor crop = image.narrow(1, 5, 30).narrow(2, 7, 33);
  EXPECT_TRUE(torch::equal(resize_image(crop, 13, 17), resize_image(crop.contiguous(), 13, 17)));
  const at::Tensor hwc_view = image.permute({1, 2, 0}).contiguous().permute({2, 0, 1});
  EXPECT_TRUE(torch::equal(resize_image(hwc_view, 40, 21), resize_image(image, 40, 21)));
  EXPECT_TRUE(torch::equal(resize_image(hwc_view, 19, 50), resize_image(image, 19, 50)));
}

TEST(ImageCodecTest, ResizeToTheSameSizeCopiesThePixels) {
  const at::Tensor image = random_image({3, 9, 6}, 12);
  const at::Tensor same = resize_image(image, 9, 6);
  EXPECT_TRUE(torch::equal(same, image));
  EXPECT_NE(same.data_ptr(), image.data_ptr());
}

TEST(ImageCodecTest, DecodeResizesWhenAskedTo) {
  const at::Tensor image = random_image({3, 10, 8}, 13);
  const std::string png = encode_png(image);
  EXPECT_TRUE(torch::equal(decode(png, {0, 5, 12}), resize_image(image, 5, 12)));
  EXPECT_TRUE(torch::equal(decode(png, {1, 4, 4}), resize_image(expected_grey(image), 4, 4)));
  EXPECT_TRUE(torch::equal(decode(png, {0, 10, 8}), image));
}

// ---- arguments ----

TEST(ImageCodecTest, BadOptionsAndArgumentsAreInvalidArguments) {
  const std::string png = encode_png(random_image({3, 4, 4}, 14));
  expect_contains(message_of<InvalidArgument>([&] { decode(png, {2}); }),
                  "channels must be 0 (as stored), 1 (grey) or 3 (RGB), got 2");
  expect_contains(message_of<InvalidArgument>([&] {
                    decode(png, {0, 5, 0});
                  }),
                  "got height 5 and width 0");
  expect_contains(message_of<InvalidArgument>([&] {
                    decode(png, {0, 0, 5});
                  }),
                  "got height 0 and width 5");
  expect_contains(message_of<InvalidArgument>([&] {
                    decode(png, {0, -1, -1});
                  }),
                  "got height -1 and width -1");
  expect_contains(message_of<InvalidArgument>([&] {
                    decode(png, {0, 1 << 20, 1 << 20});
                  }),
                  "more than kMaxImagePixels");
  expect_contains(message_of<InvalidArgument>([] { decode_image(nullptr, 3); }), "null");
  expect_contains(message_of<InvalidArgument>([] { decode_image(torch::zeros({4})); }),
                  "1-D uint8 CPU tensor");

  const at::Tensor image = random_image({3, 4, 4}, 15);
  expect_contains(message_of<InvalidArgument>([&] { resize_image(image, 0, 3); }), "height 0");
  expect_contains(message_of<InvalidArgument>([&] { resize_image(image[0], 3, 3); }), "[C, H, W]");
  expect_contains(message_of<InvalidArgument>([&] { resize_image(image.to(torch::kInt), 3, 3); }),
                  "uint8 or floating");
  expect_contains(message_of<InvalidArgument>([&] { encode_jpeg(image, 0); }),
                  "quality must be 1 to 100, got 0");
  expect_contains(message_of<InvalidArgument>([&] {
                    encode_jpeg(random_image({4, 4, 4}, 1));
                  }),
                  "[3, H, W]");
  expect_contains(message_of<InvalidArgument>([&] { encode_jpeg(image.narrow(2, 0, 0)); }),
                  "JPEG needs 1 to 65500 on each side");
}

}  // namespace
}  // namespace dist::data
