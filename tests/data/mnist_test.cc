#include "dist/data/mnist.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "expect_error.h"
#include "gzip_file.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::expect_contains;
using testing::TempDir;
using testing::write_file;

constexpr int kSide = 28;

std::string idx_header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string out = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
  }
  return out;
}

// Pixel p of image i: distinct per image, and image 0 starts with 255 and 0.
uint8_t pixel(int i, int p) {
  if (i == 0 && p < 2) return p == 0 ? 255 : 0;
  return static_cast<uint8_t>((i * 31 + p * 7) % 256);
}

std::string images_file(int count) {
  std::string out = idx_header(0x08, {static_cast<uint32_t>(count), kSide, kSide});
  for (int i = 0; i < count; ++i) {
    for (int p = 0; p < kSide * kSide; ++p) out.push_back(static_cast<char>(pixel(i, p)));
  }
  return out;
}

std::string labels_file(const std::vector<int>& labels) {
  std::string out = idx_header(0x08, {static_cast<uint32_t>(labels.size())});
  for (int l : labels) out.push_back(static_cast<char>(l));
  return out;
}

using testing::write_gzip;

using testing::data_error;

TEST(MnistTest, LoadsTinyTrainSet) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), images_file(3));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({7, 0, 9}));
  ImageLabelTensors data = load_mnist_format(dir.path(), Split::kTrain);

  EXPECT_EQ(data.images.scalar_type(), at::kFloat);
  EXPECT_EQ(data.images.sizes(), (std::vector<int64_t>{3, 1, kSide, kSide}));
  EXPECT_EQ(data.labels.scalar_type(), at::kLong);
  EXPECT_EQ(data.labels.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(data.labels[0].item<int64_t>(), 7);
  EXPECT_EQ(data.labels[1].item<int64_t>(), 0);
  EXPECT_EQ(data.labels[2].item<int64_t>(), 9);

  auto images = data.images.accessor<float, 4>();
  EXPECT_EQ(images[0][0][0][0], 1.0f);  // 255
  EXPECT_EQ(images[0][0][0][1], 0.0f);  // 0
  for (int i = 0; i < 3; ++i) {
    for (int p = 0; p < kSide * kSide; ++p) {
      ASSERT_FLOAT_EQ(images[i][0][p / kSide][p % kSide], pixel(i, p) / 255.0f)
          << "image " << i << " pixel " << p;
    }
  }
}

TEST(MnistTest, LoadsTestSplitPreferringGzip) {
  TempDir dir;
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), images_file(2));
  write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), labels_file({4, 2}));
  // A stale plain copy beside the .gz file must be ignored.
  write_file(dir.file("t10k-labels-idx1-ubyte"), labels_file({1, 1, 1}));
  Dataset ds = fashion_mnist(dir.path(), Split::kTest);
  ASSERT_EQ(ds.cardinality(), 2);
  Iterator it = ds.iterator();
  Element first = *it.next();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].sizes(), (std::vector<int64_t>{1, kSide, kSide}));
  EXPECT_EQ(first[1].item<int64_t>(), 4);
  EXPECT_EQ((*it.next())[1].item<int64_t>(), 2);
  EXPECT_EQ(mnist(dir.path(), Split::kTest).cardinality(), 2);
}

TEST(MnistTest, RejectsCountMismatch) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), images_file(3));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({1, 2}));
  expect_contains(data_error([&] { load_mnist_format(dir.path(), Split::kTrain); }),
                  {dir.file("train-images-idx3-ubyte"), dir.file("train-labels-idx1-ubyte"),
                   "3 images", "2 labels"});
}

TEST(MnistTest, RejectsLabelOutOfRange) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), images_file(3));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({1, 10, 2}));
  expect_contains(data_error([&] { load_mnist_format(dir.path(), Split::kTrain); }),
                  {dir.file("train-labels-idx1-ubyte"), "label 10 at index 1"});
}

TEST(MnistTest, RejectsImagesOfWrongType) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"),
             idx_header(0x0C, {1, 1, 1}) + std::string(4, '\0'));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({1}));
  expect_contains(data_error([&] { load_mnist_format(dir.path(), Split::kTrain); }),
                  {dir.file("train-images-idx3-ubyte"), "uint8 of rank 3"});
}

TEST(MnistTest, RejectsImagesThatAreNot28By28) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"),
             idx_header(0x08, {1, 14, 56}) + std::string(14 * 56, '\0'));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({1}));
  expect_contains(data_error([&] { load_mnist_format(dir.path(), Split::kTrain); }),
                  {dir.file("train-images-idx3-ubyte"), "14x56 images", "28x28"});
}

TEST(MnistTest, RejectsMissingDirectory) {
  TempDir dir;
  std::string missing = dir.file("nowhere");
  expect_contains(data_error([&] { load_mnist_format(missing, Split::kTrain); }),
                  {missing, "does not exist"});
}

TEST(MnistTest, RejectsMissingFile) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), images_file(1));
  expect_contains(data_error([&] { load_mnist_format(dir.path(), Split::kTrain); }),
                  {dir.file("train-labels-idx1-ubyte.gz"), dir.file("train-labels-idx1-ubyte")});
}

TEST(MnistTest, RealFashionMnistTestSplit) {
  if (!std::filesystem::is_directory(kFashionMnistDefaultDir)) {
    GTEST_SKIP() << kFashionMnistDefaultDir
                 << " is absent; install it with: apt-get install dataset-fashion-mnist";
  }
  ImageLabelTensors data = load_mnist_format(kFashionMnistDefaultDir, Split::kTest);
  EXPECT_EQ(data.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_GE(data.images.min().item<float>(), 0.0f);
  EXPECT_LE(data.images.max().item<float>(), 1.0f);
  ASSERT_EQ(data.labels.sizes(), (std::vector<int64_t>{10000}));
  EXPECT_EQ(data.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(data.labels.max().item<int64_t>(), 9);
  at::Tensor counts = at::bincount(data.labels);
  ASSERT_EQ(counts.numel(), 10);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c].item<int64_t>(), 1000) << "class " << c;
}

// The first N examples alone are what take(N) of the whole split gives, on the real (gzip)
// files and on a small plain set; a limit past the end gives every example.
TEST(MnistTest, TheFirstExamplesAloneEqualTheWholeSplitsFirst) {
  if (!std::filesystem::is_directory(kFashionMnistDefaultDir)) {
    GTEST_SKIP() << kFashionMnistDefaultDir
                 << " is absent; install it with: apt-get install dataset-fashion-mnist";
  }
  const ImageLabelTensors whole = load_mnist_format(kFashionMnistDefaultDir, Split::kTest);
  const ImageLabelTensors first =
      load_mnist_format(kFashionMnistDefaultDir, Split::kTest, Env::Default(), 300);
  ASSERT_EQ(first.images.size(0), 300);
  EXPECT_TRUE(first.images.equal(whole.images.slice(0, 0, 300)));
  EXPECT_TRUE(first.labels.equal(whole.labels.slice(0, 0, 300)));
  EXPECT_EQ(
      fashion_mnist_bytes(kFashionMnistDefaultDir, Split::kTest, Env::Default(), 0).cardinality(),
      0);

  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), images_file(3));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({7, 0, 9}));
  const ImageLabelTensors all = load_mnist_format(dir.path(), Split::kTrain);
  const ImageLabelTensors two = load_mnist_format(dir.path(), Split::kTrain, Env::Default(), 2);
  EXPECT_TRUE(two.images.equal(all.images.slice(0, 0, 2)));
  EXPECT_EQ(two.labels.sizes(), (std::vector<int64_t>{2}));
  EXPECT_TRUE(
      load_mnist_format(dir.path(), Split::kTrain, Env::Default(), 10).images.equal(all.images));
  // Only the examples taken are checked: a bad label after them is not read.
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({7, 0, 12}));
  EXPECT_EQ(load_mnist_format(dir.path(), Split::kTrain, Env::Default(), 2).labels.numel(), 2);
  expect_contains(data_error([&] { load_mnist_format(dir.path(), Split::kTrain); }),
                  {"label 12", "index 2"});
  // A file shorter than its header says is still refused, taken in part or whole.
  write_file(dir.file("train-images-idx3-ubyte"), images_file(3).substr(0, 100));
  EXPECT_FALSE(
      data_error([&] { load_mnist_format(dir.path(), Split::kTrain, Env::Default(), 1); }).empty());
}

// The bytes kept until batched give the batches of the float set, bit for bit.
TEST(MnistTest, BytesScaledAfterBatchingEqualFloatElements) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), images_file(5));
  write_file(dir.file("train-labels-idx1-ubyte"), labels_file({3, 1, 4, 1, 5}));
  const Dataset bytes = fashion_mnist_bytes(dir.path(), Split::kTrain);
  std::vector<Element> expected, got;
  for (const auto& b : fashion_mnist(dir.path(), Split::kTrain).shuffle(5, 7).batch(2).iterator(0))
    expected.push_back(b);
  for (const auto& b : bytes.shuffle(5, 7).batch(2).map(scale_images_of).iterator(0))
    got.push_back(b);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i][0].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(got[i][0], expected[i][0])) << "batch " << i;
    EXPECT_TRUE(at::equal(got[i][1], expected[i][1])) << "batch " << i;
  }
  for (const auto& b : bytes.iterator(0)) {
    EXPECT_EQ(b[0].scalar_type(), at::kByte);
    EXPECT_EQ(b[0].sizes(), (std::vector<int64_t>{1, kSide, kSide}));
    break;
  }
}

TEST(MnistTest, ScalingRefusesImagesThatAreNotBytes) {
  try {
    scale_images_of({at::zeros({1, kSide, kSide}), at::zeros({1}, at::kLong)});
    FAIL() << "float images were scaled";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("uint8 images (from fashion_mnist_bytes), got Float"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dist::data
