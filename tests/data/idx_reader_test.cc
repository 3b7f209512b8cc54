#include "dist/data/idx_reader.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
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

void append_be32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// An IDX file: magic (0, 0, type, rank), big-endian dims, then `data` as given.
std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string out = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) append_be32(&out, d);
  return out + data;
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

using testing::write_gzip;

using testing::data_error;

// Round trips, each run on a plain and on a gzip file.
class IdxRoundTripTest : public ::testing::TestWithParam<bool> {
 protected:
  at::Tensor round_trip(const std::string& file_bytes) {
    std::string path = dir_.file(GetParam() ? "data.idx.gz" : "data.idx");
    if (GetParam()) {
      write_gzip(path, file_bytes);
    } else {
      write_file(path, file_bytes);
    }
    return read_idx(path);
  }
  TempDir dir_;
};

TEST_P(IdxRoundTripTest, Uint8) {
  at::Tensor t = round_trip(idx_bytes(0x08, {2, 3}, bytes({0, 1, 127, 128, 254, 255})));
  EXPECT_EQ(t.scalar_type(), at::kByte);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
  std::vector<int64_t> expected = {0, 1, 127, 128, 254, 255};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.flatten()[i].item<int64_t>(), expected[i]) << i;
}

TEST_P(IdxRoundTripTest, Int8) {
  at::Tensor t = round_trip(idx_bytes(0x09, {4}, bytes({0x80, 0xFF, 0x00, 0x7F})));
  EXPECT_EQ(t.scalar_type(), at::kChar);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{4}));
  std::vector<int64_t> expected = {-128, -1, 0, 127};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t[i].item<int64_t>(), expected[i]) << i;
}

TEST_P(IdxRoundTripTest, Int16BigEndian) {
  at::Tensor t = round_trip(idx_bytes(0x0B, {3}, bytes({0x01, 0x02, 0xFF, 0xFE, 0x80, 0x00})));
  EXPECT_EQ(t.scalar_type(), at::kShort);
  std::vector<int64_t> expected = {0x0102, -2, -32768};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t[i].item<int64_t>(), expected[i]) << i;
}

TEST_P(IdxRoundTripTest, Int32BigEndian) {
  at::Tensor t = round_trip(idx_bytes(0x0C, {2, 2},
                                      bytes({0x01, 0x02, 0x03, 0x04, 0xFF, 0xFF, 0xFF, 0xFF,  //
                                             0x80, 0x00, 0x00, 0x00, 0x7F, 0xFF, 0xFF, 0xFF})));
  EXPECT_EQ(t.scalar_type(), at::kInt);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t[0][0].item<int64_t>(), 0x01020304);
  EXPECT_EQ(t[0][1].item<int64_t>(), -1);
  EXPECT_EQ(t[1][0].item<int64_t>(), INT32_MIN);
  EXPECT_EQ(t[1][1].item<int64_t>(), INT32_MAX);
}

TEST_P(IdxRoundTripTest, Float32BigEndian) {
  // -1.5f is 0xBFC00000, 1.0f is 0x3F800000, 0.1f is 0x3DCCCCCD.
  at::Tensor t = round_trip(idx_bytes(0x0D, {3},
                                      bytes({0xBF, 0xC0, 0x00, 0x00, 0x3F, 0x80, 0x00, 0x00,  //
                                             0x3D, 0xCC, 0xCC, 0xCD})));
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_EQ(t[0].item<float>(), -1.5f);
  EXPECT_EQ(t[1].item<float>(), 1.0f);
  EXPECT_EQ(t[2].item<float>(), 0.1f);
}

TEST_P(IdxRoundTripTest, Float64BigEndian) {
  // -1.5 is 0xBFF8000000000000, 0.1 is 0x3FB999999999999A.
  at::Tensor t = round_trip(idx_bytes(0x0E, {2},
                                      bytes({0xBF, 0xF8, 0, 0, 0, 0, 0, 0,  //
                                             0x3F, 0xB9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9A})));
  EXPECT_EQ(t.scalar_type(), at::kDouble);
  EXPECT_EQ(t[0].item<double>(), -1.5);
  EXPECT_EQ(t[1].item<double>(), 0.1);
}

TEST_P(IdxRoundTripTest, ZeroSizedDimGivesEmptyTensor) {
  at::Tensor t = round_trip(idx_bytes(0x08, {0, 28, 28}, ""));
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{0, 28, 28}));
}

INSTANTIATE_TEST_SUITE_P(Idx, IdxRoundTripTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Gzip" : "Plain"; });

// ---- corrupt files ---------------------------------------------------------------

class IdxReaderTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& contents) {
    std::string path = dir_.file(name);
    write_file(path, contents);
    return path;
  }
  TempDir dir_;
};

TEST_F(IdxReaderTest, RejectsWrongMagic) {
  std::string path = write("magic.idx", bytes({0x01, 0x00, 0x08, 0x01, 0, 0, 0, 1, 5}));
  EXPECT_THROW(read_idx(path), DataError);
  expect_contains(data_error([&] { read_idx(path); }), {path, "wrong magic number"});
}

TEST_F(IdxReaderTest, RejectsUnknownType) {
  std::string path = write("type.idx", idx_bytes(0x0A, {1}, bytes({5})));
  expect_contains(data_error([&] { read_idx(path); }), {path, "unknown IDX type code 10"});
}

TEST_F(IdxReaderTest, RejectsZeroDims) {
  std::string path = write("rank0.idx", bytes({0, 0, 0x08, 0, 5}));
  expect_contains(data_error([&] { read_idx(path); }), {path, "zero dims"});
}

TEST_F(IdxReaderTest, RejectsTooManyDims) {
  std::string path = write("rank9.idx", idx_bytes(0x08, std::vector<uint32_t>(9, 1), "x"));
  expect_contains(data_error([&] { read_idx(path); }), {path, "too many dims", "(9)"});
}

TEST_F(IdxReaderTest, RejectsTruncatedData) {
  std::string path = write("short.idx", idx_bytes(0x08, {10}, "12345"));
  expect_contains(data_error([&] { read_idx(path); }),
                  {path, "truncated", "10 uint8 values", "holds only 13 bytes"});
}

TEST_F(IdxReaderTest, RejectsTruncatedHeader) {
  std::string path = write("header.idx", bytes({0, 0, 0x08, 3, 0, 0, 0, 2, 0}));
  expect_contains(data_error([&] { read_idx(path); }), {path, "truncated", "IDX dimensions"});
}

TEST_F(IdxReaderTest, RejectsHugeClaimBeforeAllocating) {
  // 2^31 x 2^31 bytes (4 EiB): a reader that trusted the header would fail to allocate,
  // which LibTorch reports as c10::Error, not DataError.
  std::string data = idx_bytes(0x08, {1u << 31, 1u << 31}, "abcd");
  std::string path = write("huge.idx", data);
  expect_contains(data_error([&] { read_idx(path); }),
                  {path, "truncated or its header is corrupt", "2147483648 x 2147483648"});
  std::string gz_path = dir_.file("huge.idx.gz");
  write_gzip(gz_path, data);
  expect_contains(data_error([&] { read_idx(gz_path); }),
                  {gz_path, "truncated or its header is corrupt", "can hold at most"});
}

TEST_F(IdxReaderTest, RejectsDimsWhoseProductOverflows) {
  std::string path = write("overflow.idx", idx_bytes(0x0E, std::vector<uint32_t>(4, ~0u), ""));
  expect_contains(data_error([&] { read_idx(path); }), {path, "overflow"});
}

// Found by tests/fuzz: the tensor is empty, but LibTorch multiplies every dim and threw
// c10::Error ("Storage size calculation overflowed") instead of a DataError.
TEST_F(IdxReaderTest, RejectsZeroDimWhenTheOtherDimsOverflow) {
  std::string path =
      write("zero_overflow.idx", idx_bytes(0x08, {0, 1u << 31, 1u << 31, 1u << 31}, ""));
  expect_contains(data_error([&] { read_idx(path); }), {path, "overflow"});
  std::string gz_path = dir_.file("zero_overflow.idx.gz");
  write_gzip(gz_path, idx_bytes(0x08, {1u << 31, 1u << 31, 1u << 31, 0}, ""));
  expect_contains(data_error([&] { read_idx(gz_path); }), {gz_path, "overflow"});
}

TEST_F(IdxReaderTest, RejectsTrailingBytes) {
  std::string data = idx_bytes(0x08, {2}, "abXYZ");
  std::string path = write("trailing.idx", data);
  expect_contains(data_error([&] { read_idx(path); }), {path, "has 3 trailing bytes"});
  std::string gz_path = dir_.file("trailing.idx.gz");
  write_gzip(gz_path, data);
  expect_contains(data_error([&] { read_idx(gz_path); }), {gz_path, "has 3 trailing bytes"});
}

TEST_F(IdxReaderTest, RejectsTruncatedGzip) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data.push_back(static_cast<char>((i * 7919) % 251));
  std::string gz_path = dir_.file("full.idx.gz");
  write_gzip(gz_path, idx_bytes(0x08, {5000}, data));
  std::string compressed = testing::read_file(gz_path);
  ASSERT_GT(compressed.size(), 100u);
  ASSERT_EQ(read_idx(gz_path).size(0), 5000);
  // Cut inside the header, the deflate data, the CRC and the length field.
  for (size_t keep :
       {size_t{12}, compressed.size() / 2, compressed.size() - 8, compressed.size() - 1}) {
    SCOPED_TRACE(keep);
    std::string path = write("cut.idx.gz", compressed.substr(0, keep));
    expect_contains(data_error([&] { read_idx(path); }), {path, "truncated"});
  }
}

TEST_F(IdxReaderTest, RejectsGzipWithBadChecksum) {
  std::string gz_path = dir_.file("crc.idx.gz");
  write_gzip(gz_path, idx_bytes(0x08, {4}, "abcd"));
  std::string compressed = testing::read_file(gz_path);
  compressed[compressed.size() - 8] ^= 0x01;  // first byte of the CRC-32
  std::string path = write("crc.idx.gz", compressed);
  expect_contains(data_error([&] { read_idx(path); }), {path, "corrupt", "zlib"});
}

TEST_F(IdxReaderTest, RejectsEmptyFile) {
  std::string path = write("empty.idx", "");
  expect_contains(data_error([&] { read_idx(path); }), {path, "is empty"});
}

TEST_F(IdxReaderTest, RejectsMissingFile) {
  std::string path = dir_.file("missing.idx");
  expect_contains(data_error([&] { read_idx(path); }), {path, "cannot open", "No such file"});
}

TEST_F(IdxReaderTest, RejectsDirectory) {
  expect_contains(data_error([&] { read_idx(dir_.path()); }), {dir_.path(), "not a regular file"});
}

}  // namespace
}  // namespace dist::data
