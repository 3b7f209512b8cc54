#include "dist/data/cifar10.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "expect_error.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::expect_contains;
using testing::TempDir;
using testing::write_file;

constexpr int kPlane = 32 * 32;

// Byte of record r, channel c, pixel p (row-major in the plane): each channel of each record
// differs, so a transposed or interleaved layout shows.
uint8_t value(int r, int c, int p) { return static_cast<uint8_t>((p + 64 * c + 17 * r) % 256); }

std::string records(const std::vector<int>& labels, int first_record = 0) {
  std::string out;
  for (size_t i = 0; i < labels.size(); ++i) {
    out.push_back(static_cast<char>(labels[i]));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < kPlane; ++p) {
        out.push_back(static_cast<char>(value(first_record + static_cast<int>(i), c, p)));
      }
    }
  }
  return out;
}

using testing::data_error;

TEST(CifarTest, ReadsChannelLayoutExactly) {
  TempDir dir;
  std::string path = dir.file("batch.bin");
  write_file(path, records({3, 9}));
  ImageLabelTensors data = read_cifar10_batches({path});

  EXPECT_EQ(data.images.scalar_type(), at::kFloat);
  ASSERT_EQ(data.images.sizes(), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_EQ(data.labels.scalar_type(), at::kLong);
  ASSERT_EQ(data.labels.sizes(), (std::vector<int64_t>{2}));
  EXPECT_EQ(data.labels[0].item<int64_t>(), 3);
  EXPECT_EQ(data.labels[1].item<int64_t>(), 9);

  auto images = data.images.accessor<float, 4>();
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          ASSERT_EQ(std::lround(images[r][c][y][x] * 255.0f), value(r, c, y * 32 + x))
              << "record " << r << " channel " << c << " y " << y << " x " << x;
        }
      }
    }
  }
  // Red pixel 255 of record 0 is 255 -> 1.0; green pixel 0 is 64 -> 64/255.
  EXPECT_EQ(images[0][0][7][31], 1.0f);
  EXPECT_FLOAT_EQ(images[0][1][0][0], 64.0f / 255.0f);
}

TEST(CifarTest, ConcatenatesBatchesInOrder) {
  TempDir dir;
  write_file(dir.file("a.bin"), records({1}));
  write_file(dir.file("b.bin"), records({2, 5}, 1));
  ImageLabelTensors data = read_cifar10_batches({dir.file("a.bin"), dir.file("b.bin")});
  ASSERT_EQ(data.labels.size(0), 3);
  EXPECT_EQ(data.labels[2].item<int64_t>(), 5);
  EXPECT_EQ(std::lround(data.images[2][2][0][0].item<float>() * 255), value(2, 2, 0));
}

TEST(CifarTest, LoadsSplitsFromArchiveLayout) {
  TempDir dir;
  std::string bin = dir.file("cifar-10-batches-bin");
  std::filesystem::create_directory(bin);
  for (int i = 1; i <= 5; ++i) {
    write_file(bin + "/data_batch_" + std::to_string(i) + ".bin", records({i}));
  }
  write_file(bin + "/test_batch.bin", records({0, 8}));

  ImageLabelTensors train = load_cifar10(dir.path(), Split::kTrain);
  ASSERT_EQ(train.labels.size(0), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(train.labels[i].item<int64_t>(), i + 1);
  Dataset test = cifar10(bin, Split::kTest);  // the batches folder itself works too
  EXPECT_EQ(test.cardinality(), 2);
  Element first = *test.iterator().next();
  EXPECT_EQ(first[0].sizes(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(first[1].item<int64_t>(), 0);
}

TEST(CifarTest, RejectsTruncatedFile) {
  TempDir dir;
  std::string path = dir.file("short.bin");
  write_file(path, records({1, 2}).substr(0, 2 * 3073 - 100));
  expect_contains(data_error([&] { read_cifar10_batches({path}); }),
                  {path, "6046 bytes", "truncated or not a CIFAR-10 binary batch"});
}

TEST(CifarTest, RejectsEmptyFile) {
  TempDir dir;
  std::string path = dir.file("empty.bin");
  write_file(path, "");
  expect_contains(data_error([&] { read_cifar10_batches({path}); }),
                  {path, "0 bytes", "truncated or not a CIFAR-10 binary batch"});
}

TEST(CifarTest, RejectsBadLabel) {
  TempDir dir;
  std::string path = dir.file("label.bin");
  write_file(path, records({1, 10, 2}));
  expect_contains(data_error([&] { read_cifar10_batches({path}); }),
                  {path, "label 10 in record 1"});
}

TEST(CifarTest, RejectsMissingBatch) {
  TempDir dir;
  write_file(dir.file("test_batch.bin"), records({1}));
  expect_contains(data_error([&] { load_cifar10(dir.path(), Split::kTrain); }),
                  {dir.file("data_batch_1.bin"), "does not exist"});
  std::string missing = dir.file("nowhere");
  expect_contains(data_error([&] { load_cifar10(missing, Split::kTest); }),
                  {missing, "does not exist"});
}

TEST(CifarTest, RejectsEmptyPathList) { EXPECT_THROW(read_cifar10_batches({}), InvalidArgument); }

}  // namespace
}  // namespace dist::data
