// PNG files read back by an independent decoder (tests/png_reader.h: zlib and the PNG
// specification, not libpng), and by ImageMagick's identify where it is installed; grids and the
// mapping to uint8 checked pixel by pixel.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "dist/core/error.h"
#include "dist/train/image_io.h"
#include "png_reader.h"
#include "test_envs.h"
#include "test_util.h"

namespace dist {
namespace {

using testing::decode_png;
using testing::DecodedPng;

// Reproducible pixels with both smooth and noisy regions, so libpng picks various row filters.
at::Tensor test_image(std::vector<int64_t> shape, int64_t seed) {
  torch::manual_seed(seed);
  auto noise = torch::randint(0, 256, shape, torch::kLong);
  auto ramp = torch::arange(noise.numel(), torch::kLong).reshape(shape) * 7;
  auto mask = torch::rand(shape) < 0.5;
  return torch::where(mask, noise, ramp.remainder(256)).to(torch::kUInt8);
}

// The tensor's pixels in PNG order: rows of interleaved channels.
std::vector<uint8_t> interleaved(const at::Tensor& image) {
  auto hwc = (image.dim() == 2 ? image.unsqueeze(0) : image).permute({1, 2, 0}).contiguous();
  const auto* data = hwc.data_ptr<uint8_t>();
  return std::vector<uint8_t>(data, data + hwc.numel());
}

struct PngCase {
  std::vector<int64_t> shape;
  int color_type;
};

TEST(ImageIoTest, PngFilesDecodeToTheTensorsPixels) {
  testing::TempDir dir;
  const std::vector<PngCase> cases = {
      {{5, 7}, 0},      {{1, 5, 7}, 0},   {{3, 5, 7}, 2},   {{4, 5, 7}, 6},
      {{1, 1}, 0},      {{3, 1, 1}, 2},   {{4, 1, 13}, 6},  {{3, 13, 1}, 2},
      {{3, 48, 64}, 2}, {{1, 33, 31}, 0}, {{4, 29, 17}, 6},
  };
  int64_t seed = 0;
  for (const auto& c : cases) {
    const at::Tensor image = test_image(c.shape, ++seed);
    const std::string path = dir.file("image" + std::to_string(seed) + ".png");
    write_png(path, image);
    const std::string bytes = testing::read_file(path);
    EXPECT_EQ(bytes, encode_png(image));

    std::string error;
    const DecodedPng png = decode_png(bytes, &error);
    SCOPED_TRACE(::testing::Message() << "shape " << image.sizes());
    ASSERT_EQ(error, "");
    EXPECT_EQ(png.width, static_cast<uint32_t>(c.shape.back()));
    EXPECT_EQ(png.height, static_cast<uint32_t>(c.shape[c.shape.size() - 2]));
    EXPECT_EQ(png.bit_depth, 8);
    EXPECT_EQ(png.color_type, c.color_type);
    EXPECT_EQ(png.interlace, 0);
    EXPECT_EQ(png.chunk_types.front(), "IHDR");
    EXPECT_EQ(png.chunk_types.back(), "IEND");
    EXPECT_EQ(png.pixels, interleaved(image));
  }
}

TEST(ImageIoTest, ImageMagickIdentifiesTheFile) {
  if (std::system("command -v identify > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "ImageMagick's identify is not installed";
  testing::TempDir dir;
  const std::string path = dir.file("rgba.png");
  write_png(path, test_image({4, 5, 7}, 1));
  FILE* pipe = popen(("identify -format '%m %w %h %z' " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 256> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_EQ(out, "PNG 7 5 8");
}

TEST(ImageIoTest, WritesAtomicallyThroughTheGivenEnv) {
  testing::TempDir dir;
  testing::RecordingEnv env(dir.path());
  const at::Tensor image = test_image({3, 5, 7}, 3);
  write_png(dir.file("x.png"), image, &env);
  const auto ops = env.operations();
  ASSERT_GE(ops.size(), 4u);
  EXPECT_EQ(ops.front(), "new_writable_file x.png.tmp.<pid>");
  EXPECT_NE(std::find(ops.begin(), ops.end(), "sync x.png.tmp.<pid>"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "rename_file x.png.tmp.<pid> x.png"), ops.end());
  EXPECT_EQ(testing::read_file(dir.file("x.png")), encode_png(image));
}

TEST(ImageIoTest, ToUint8MapsTheRangeAndClampsOutsideIt) {
  const double inf = std::numeric_limits<double>::infinity();
  const auto tanh_out =
      torch::tensor({-1.0, 1.0, 0.0, -2.0, 2.0, -1.0 + 2.0 / 255, inf, -inf, std::nan("")});
  const auto mapped = to_uint8_image(tanh_out, -1, 1);
  EXPECT_EQ(mapped.scalar_type(), torch::kUInt8);
  // 0 maps to 127.5, rounded half up; -1 + 2/255 to exactly 1.
  EXPECT_TRUE(
      torch::equal(mapped, torch::tensor({0, 255, 128, 0, 255, 1, 255, 0, 0}, torch::kUInt8)))
      << mapped;

  const auto unit = torch::tensor({0.0f, 1.0f, 0.5f, 1.0f / 255, 0.999f, 1.5f, -0.25f});
  EXPECT_TRUE(torch::equal(to_uint8_image(unit),
                           torch::tensor({0, 255, 128, 1, 255, 255, 0}, torch::kUInt8)))
      << to_uint8_image(unit);

  // Integer input, and the shape is kept.
  const auto counts = torch::arange(11, torch::kLong).reshape({1, 11});
  const auto grey = to_uint8_image(counts, 0, 10);
  EXPECT_EQ(grey.sizes(), counts.sizes());
  EXPECT_TRUE(torch::equal(
      grey, torch::tensor({{0, 26, 51, 77, 102, 128, 153, 179, 204, 230, 255}}, torch::kUInt8)))
      << grey;

  for (auto [low, high] : {std::pair{1.0, 1.0}, {1.0, 0.0}, {0.0, inf}, {std::nan(""), 1.0}})
    EXPECT_THROW(to_uint8_image(unit, low, high), InvalidArgument) << low << " " << high;
  EXPECT_NE(testing::message_of<std::exception>([&] { to_uint8_image(unit, 1, 0); }).find("[1, 0]"),
            std::string::npos);
}

TEST(ImageIoTest, GridPlacesEachTileRowMajorInsideThePadding) {
  // Five 2x3x4 images, 2 columns, 1 pixel of padding: 3 rows, the last one short.
  std::vector<at::Tensor> images;
  for (int i = 0; i < 5; ++i)
    images.push_back(torch::arange(24, torch::kFloat).reshape({2, 3, 4}) + 100 * (i + 1));
  const auto grid = image_grid(images, 2, 1, -1.0);
  ASSERT_EQ(grid.sizes(), (std::vector<int64_t>{2, 3 * 4 + 1, 2 * 5 + 1}));
  EXPECT_EQ(grid.scalar_type(), torch::kFloat);
  auto covered = torch::zeros({13, 11}, torch::kBool);
  for (int i = 0; i < 5; ++i) {
    const int64_t top = 1 + (i / 2) * 4, left = 1 + (i % 2) * 5;
    EXPECT_TRUE(torch::equal(grid.slice(1, top, top + 3).slice(2, left, left + 4), images[i]))
        << "tile " << i;
    covered.slice(0, top, top + 3).slice(1, left, left + 4).fill_(true);
  }
  // Everything else, the empty sixth place included, is padding.
  EXPECT_TRUE(
      grid.masked_select(covered.logical_not().expand({2, 13, 11})).eq(-1).all().item<bool>());
  EXPECT_EQ(covered.sum().item<int64_t>(), 5 * 12);

  // A batch [N,C,H,W], unbound, gives the same grid.
  EXPECT_TRUE(torch::equal(image_grid(torch::stack(images).unbind(0), 2, 1, -1.0), grid));
}

TEST(ImageIoTest, GridOfGreyImagesFewerThanColumnsAndNoPadding) {
  const auto a = torch::full({2, 3}, 10, torch::kUInt8), b = torch::full({2, 3}, 20, torch::kUInt8);
  const auto grid = image_grid({a, b}, 8, 0);  // two places wide, not eight
  EXPECT_TRUE(torch::equal(grid, torch::cat({a, b}, 1))) << grid;
  EXPECT_TRUE(torch::equal(image_grid({a}, 3, 0), a));  // one image, not two rows of three

  const auto padded = image_grid({a, b}, 1, 2, 255);  // one column
  ASSERT_EQ(padded.sizes(), (std::vector<int64_t>{2 * 4 + 2, 3 + 4}));
  EXPECT_TRUE(torch::equal(padded.slice(0, 2, 4).slice(1, 2, 5), a));
  EXPECT_TRUE(torch::equal(padded.slice(0, 6, 8).slice(1, 2, 5), b));
  EXPECT_EQ(padded.eq(255).sum().item<int64_t>(), 10 * 7 - 12);
  // A grid is a PNG image as it is.
  std::string error;
  const auto png = decode_png(encode_png(padded), &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(png.pixels, interleaved(padded));
}

TEST(ImageIoTest, GridRejectsWhatItCannotTile) {
  const auto image = torch::zeros({3, 4, 4});
  EXPECT_THROW(image_grid(std::vector<at::Tensor>{}, 2), InvalidArgument);
  EXPECT_THROW(image_grid({image}, 0), InvalidArgument);
  EXPECT_THROW(image_grid({image}, 1, -1), InvalidArgument);
  EXPECT_THROW(image_grid({torch::zeros({1, 3, 4, 4})}, 1), InvalidArgument);
  EXPECT_THROW(image_grid({image.to(torch::kUInt8)}, 1, 2, 256), InvalidArgument);
  const std::string mismatch = testing::message_of<std::exception>([&] {
    image_grid({image, torch::zeros({3, 4, 5})}, 2);
  });
  EXPECT_NE(mismatch.find("image 1 is [3, 4, 5]"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("[3, 4, 4]"), std::string::npos) << mismatch;
  EXPECT_THROW(image_grid({image, image.to(torch::kDouble)}, 2), InvalidArgument);
}

TEST(ImageIoTest, BadImagesAreNamedAndWriteNothing) {
  testing::TempDir dir;
  const std::string path = dir.file("bad.png");
  auto expect_invalid = [&](const at::Tensor& image, std::vector<std::string> parts) {
    std::string what;
    try {
      write_png(path, image);
      ADD_FAILURE() << "expected InvalidArgument for " << image.sizes();
    } catch (const InvalidArgument& e) {
      what = e.what();
    }
    for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
    EXPECT_THROW(encode_png(image), InvalidArgument);
  };
  expect_invalid(torch::zeros({2, 3, 4, 4}, torch::kUInt8),
                 {"[2, 3, 4, 4]", "4 dimensions", "[C,H,W]", "image_grid"});
  expect_invalid(torch::zeros({2, 4, 4}, torch::kUInt8), {"[2, 4, 4]", "2 channels", "4 (RGBA)"});
  expect_invalid(torch::zeros({4}, torch::kUInt8), {"[4]", "[H,W]"});
  expect_invalid(torch::zeros({3, 4, 4}), {"[3, 4, 4]", "Float", "uint8", "to_uint8_image"});
  expect_invalid(torch::zeros({3, 0, 4}, torch::kUInt8), {"[3, 0, 4]", "0x4 pixels"});
  expect_invalid(at::Tensor(), {"undefined"});
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(ImageIoTest, AnUnwritablePathIsADataErrorNamingIt) {
  testing::TempDir dir;
  const std::string path = dir.file("missing/dir/x.png");
  const std::string what = testing::message_of<std::exception>([&] {
    write_png(path, test_image({3, 2, 2}, 4));
  });
  EXPECT_NE(what.find("cannot write PNG image '" + path + "'"), std::string::npos) << what;
  EXPECT_THROW(write_png(path, test_image({3, 2, 2}, 4)), DataError);

  testing::DiskFullEnv full(16);  // less than any PNG
  EXPECT_THROW(write_png(dir.file("full.png"), test_image({3, 2, 2}, 4), &full), DataError);
  EXPECT_FALSE(std::filesystem::exists(dir.file("full.png")));
}

}  // namespace
}  // namespace dist
