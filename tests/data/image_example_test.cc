// ImageExampleParser: raw, PNG and JPEG examples written by write_image_tfrecords read back
// with one parse each, and bad raw records named.
#include "dist/data/image_example.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/data/files.h"
#include "dist/data/tfrecord_dataset.h"
#include "dist/train/image_export.h"
#include "test_util.h"

namespace dist::data {
namespace {

// Three images of odd sizes and their labels: uint8 [3, C, 5, 7], int64 [3].
Dataset images_of(int64_t channels) {
  const at::Tensor images = torch::randint(0, 256, {3, channels, 5, 7}, torch::kByte);
  return Dataset::from_tensor_slices({images, torch::tensor({4, 0, 9}, torch::kLong)});
}

// Every record of the files, parsed by `parser` with `options`.
std::vector<Element> read_back(const std::vector<std::string>& files,
                               const DecodeImageOptions& options = {}) {
  const ImageExampleParser parser;
  std::vector<Element> read;
  for (const Element& record : tfrecord_dataset(files).iterator(0))
    read.push_back(parser.parse(bytes_view(record[0]), options, "a test record"));
  return read;
}

std::vector<std::string> written(const Dataset& examples, const std::string& prefix,
                                 ImageFormat format) {
  ImageExportOptions options;
  options.format = format;
  return write_image_tfrecords(examples, prefix, 2, options);
}

// The image each written example should read back as: the pixels themselves for raw and PNG,
// the decoded JPEG bytes (lossy) for JPEG.
at::Tensor expected_image(const at::Tensor& image, ImageFormat format) {
  if (format != ImageFormat::kJpeg) return image;
  return decode_image(string_tensor(encode_jpeg(image, 95)));
}

TEST(ImageExampleTest, RawPngAndJpegExamplesReadBackAsWritten) {
  torch::manual_seed(7);
  testing::TempDir dir;
  for (const int64_t channels : {1, 3}) {
    const Dataset examples = images_of(channels);
    for (const ImageFormat format : {ImageFormat::kRaw, ImageFormat::kPng, ImageFormat::kJpeg}) {
      SCOPED_TRACE("channels " + std::to_string(channels) + ", format " +
                   std::to_string(static_cast<int>(format)));
      const auto read = read_back(written(
          examples,
          dir.file("f" + std::to_string(static_cast<int>(format)) + std::to_string(channels)),
          format));
      std::vector<Element> want;
      for (const Element& e : examples.iterator(0)) want.push_back(e);
      ASSERT_EQ(read.size(), want.size());
      for (size_t i = 0; i < read.size(); ++i) {
        EXPECT_TRUE(read[i][0].equal(expected_image(want[i][0], format))) << "example " << i;
        EXPECT_EQ(read[i][0].sizes(), want[i][0].sizes());
        EXPECT_EQ(read[i]["image/class/label"].item<int64_t>(), want[i][1].item<int64_t>());
      }
    }
  }
}

TEST(ImageExampleTest, RawPixelsAreConvertedAsTheSameImageDecodedFromPng) {
  torch::manual_seed(8);
  testing::TempDir dir;
  for (const int64_t channels : {1, 3}) {
    const Dataset examples = images_of(channels);
    const auto raw =
        written(examples, dir.file("raw" + std::to_string(channels)), ImageFormat::kRaw);
    const auto png =
        written(examples, dir.file("png" + std::to_string(channels)), ImageFormat::kPng);
    for (const DecodeImageOptions options :
         {DecodeImageOptions{1, 0, 0, true}, DecodeImageOptions{3, 0, 0, true},
          DecodeImageOptions{0, 3, 9, true}, DecodeImageOptions{1, 8, 4, false}}) {
      const auto from_raw = read_back(raw, options);
      const auto from_png = read_back(png, options);
      ASSERT_EQ(from_raw.size(), 3u);
      for (size_t i = 0; i < from_raw.size(); ++i) {
        EXPECT_TRUE(from_raw[i][0].equal(from_png[i][0]))
            << "channels " << channels << " to " << options.channels << ", size " << options.height
            << "x" << options.width << ", example " << i;
      }
    }
  }
  // Grey from RGB is PIL's convert("L"): (19595 R + 38470 G + 7471 B + 32768) >> 16.
  const at::Tensor rgb = torch::tensor({255, 0, 10, 0, 255, 20, 0, 0, 30}, torch::kByte);
  const at::Tensor grey = raw_image(rgb, 3, 1, 3, {1, 0, 0, true});
  EXPECT_TRUE(grey.equal(torch::tensor({76, 150, 18}, torch::kByte).view({1, 1, 3}))) << grey;
}

// A raw example with the given size features over `bytes` bytes.
std::string raw_record(int64_t bytes, int64_t channels, int64_t height, int64_t width) {
  ExampleBuilder b;
  b.add_bytes("image/encoded", std::string(static_cast<size_t>(bytes), '\x7f'));
  b.add_bytes("image/format", "raw");
  b.add_int64("image/channels", channels);
  b.add_int64("image/height", height);
  b.add_int64("image/width", width);
  b.add_int64("image/class/label", 1);
  return b.serialize();
}

TEST(ImageExampleTest, BadRawRecordsAreNamedWithTheReason) {
  const ImageExampleParser parser;
  const std::string source = "record 3 of shard-00001.tfrecord";
  struct Case {
    std::string record;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {raw_record(2 * 4 * 5, 2, 4, 5), "a raw image of 2 channels"},
      {raw_record(0, 4, 4, 5), "a raw image of 4 channels"},
      {raw_record(3 * 4 * 5 - 1, 3, 4, 5),
       "a raw image of 59 bytes, but its image/channels, "
       "image/height and image/width say 3x4x5"},
      {raw_record(0, 1, 0, 5), "a raw image of 0 bytes"},
      {raw_record(20, 1, 4, -5), "say 1x4x-5"},
  };
  for (const Case& c : cases) {
    const std::string what =
        testing::message_of<DataError>([&] { parser.parse(c.record, {}, source); });
    EXPECT_EQ(what.rfind(source + ": ", 0), 0u) << what;
    EXPECT_TRUE(testing::contains(what, c.reason)) << what;
  }
  // A record without its label, and bytes that are no Example, are named too.
  ExampleBuilder no_label;
  no_label.add_bytes("image/encoded", "x");
  for (const std::string& record : {no_label.serialize(), std::string("\x0a\x05", 2)}) {
    const std::string what =
        testing::message_of<DataError>([&] { parser.parse(record, {}, source); });
    EXPECT_EQ(what.rfind(source + ": ", 0), 0u) << what;
  }
  // A good raw record reads.
  EXPECT_EQ(parser.parse(raw_record(20, 1, 4, 5), {}, source)[0].sizes(),
            (std::vector<int64_t>{1, 4, 5}));
}

}  // namespace
}  // namespace dist::data
