#include "dist/train/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "test_util.h"

namespace dist {
namespace {

using testing::files_in;
using testing::read_file;
using testing::TempDir;
using testing::write_file;
using TensorList = std::vector<std::pair<std::string, torch::Tensor>>;

// 8 bytes, little-endian.
std::string le64(uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(value >> (8 * i));
  return out;
}

// A file assembled byte by byte: the header length, the header, the data section.
std::string file_of(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string bytes_of(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

// Every dtype the format supports, with values at the edges of each, plus a non-contiguous
// tensor, a scalar and an empty one.
TensorList every_dtype() {
  auto inf = std::numeric_limits<double>::infinity();
  return {
      {"f64", torch::tensor({1.5, -0.0, inf, 1e300, -1e-310}, torch::kDouble)},
      {"f32", torch::arange(6, torch::kFloat).reshape({2, 3}).t()},
      {"f16", torch::tensor({1.0, -2.5, 65504.0, 0.000061035}).to(torch::kHalf)},
      {"bf16", torch::tensor({1.0, -3.0, 1e38}).to(torch::kBFloat16)},
      {"i64", torch::tensor({std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(), int64_t{0}},
                            torch::kLong)},
      {"i32", torch::tensor({std::numeric_limits<int32_t>::min(), 7, -1}, torch::kInt)},
      {"i16", torch::tensor({-32768, 32767}, torch::kShort)},
      {"i8", torch::tensor({-128, 127, 0}, torch::kChar)},
      {"u8", torch::tensor({0, 255, 17}, torch::kByte).reshape({3, 1})},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.25f)},
      {"empty", torch::zeros({0, 3}, torch::kFloat)},
  };
}

void expect_same(const TensorList& actual, const TensorList& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE(expected[i].first);
    EXPECT_EQ(actual[i].first, expected[i].first);
    EXPECT_EQ(actual[i].second.scalar_type(), expected[i].second.scalar_type());
    EXPECT_EQ(actual[i].second.sizes(), expected[i].second.sizes());
    EXPECT_EQ(bytes_of(actual[i].second), bytes_of(expected[i].second));  // bit-exact
  }
}

// Loading `bytes` must throw DataError whose message holds the path and every one of `parts`.
void expect_data_error(const std::string& bytes, const std::vector<std::string>& parts) {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  write_file(path, bytes);
  try {
    load_safetensors(path);
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

// ---- round trips ----------------------------------------------------------------------------

TEST(SafetensorsTest, RoundTripsEveryDtypeExactly) {
  TempDir dir;
  std::string path = dir.file("model.safetensors");
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "120"}};
  auto tensors = every_dtype();
  save_safetensors(path, tensors, metadata);
  SafetensorsFile loaded = load_safetensors(path);
  expect_same(loaded.tensors, tensors);  // in the order they were written
  EXPECT_EQ(loaded.metadata, metadata);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsTest, SavesFromAutogradAndNonContiguousTensors) {
  TempDir dir;
  auto weight = torch::randn({4, 3}, torch::kDouble).requires_grad_(true);
  auto column = torch::arange(12, torch::kInt).reshape({3, 4}).select(1, 2);
  save_safetensors(dir.file("a"), {{"w", weight}, {"c", column}});
  auto loaded = load_safetensors(dir.file("a"));
  EXPECT_TRUE(torch::equal(loaded.tensors[0].second, weight.detach()));
  EXPECT_TRUE(torch::equal(loaded.tensors[1].second, torch::tensor({2, 6, 10}, torch::kInt)));
  EXPECT_FALSE(loaded.tensors[0].second.requires_grad());
}

TEST(SafetensorsTest, RoundTripsNoTensors) {
  TempDir dir;
  save_safetensors(dir.file("a"), {});
  EXPECT_EQ(read_file(dir.file("a")), le64(8) + "{}      ");
  auto loaded = load_safetensors(dir.file("a"));
  EXPECT_TRUE(loaded.tensors.empty());
  EXPECT_TRUE(loaded.metadata.empty());
  save_safetensors(dir.file("b"), {}, {{"k", "v"}});
  EXPECT_EQ(load_safetensors(dir.file("b")).metadata,
            (std::map<std::string, std::string>{{"k", "v"}}));
}

TEST(SafetensorsTest, WritesTheDocumentedLayout) {
  TempDir dir;
  std::string path = dir.file("a");
  save_safetensors(path,
                   {{"w", torch::tensor({1.0f, -2.0f})}, {"b", torch::tensor({7}, torch::kInt)}},
                   {{"format", "pt"}});
  std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 12);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["w"]["dtype"], "F32");
  EXPECT_EQ(header["w"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(header["w"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(header["b"]["dtype"], "I32");
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({8, 12}));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(bytes.substr(8 + n),
            std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07\x00\x00\x00", 12));
}

// A file assembled by hand from the format description checks the reader independently of the
// writer.
TEST(SafetensorsTest, ReadsAHandWrittenFile) {
  std::string header = R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("c":{"dtype":"U8","shape":[2,2],"data_offsets":[16,20]},)"
                       R"("d":{"dtype":"F16","shape":[],"data_offsets":[20,22]},)"
                       R"("e":{"dtype":"BF16","shape":[1],"data_offsets":[22,24]},)"
                       R"("f":{"dtype":"BOOL","shape":[2],"data_offsets":[24,26]},)"
                       R"("g":{"dtype":"I64","shape":[0],"data_offsets":[26,26]},)"
                       R"("__metadata__":{"format":"pt","note":"hand made"}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data(
      "\x00\x00\x80\x3f"  // a: 1.0f
      "\x00\x00\x00\xc0"  //    -2.0f
      "\x07\x00\x00\x00"  // b: 7
      "\xff\xff\xff\xff"  //    -1
      "\x01\x02\x03\x04"  // c: [[1, 2], [3, 4]]
      "\x00\x3c"          // d: 1.0 in F16
      "\x80\x3f"          // e: 1.0 in BF16
      "\x01\x00",         // f: true, false
      26);
  TempDir dir;
  write_file(dir.file("h"), file_of(header, data));
  SafetensorsFile loaded = load_safetensors(dir.file("h"));
  expect_same(loaded.tensors, {{"a", torch::tensor({1.0f, -2.0f})},
                               {"b", torch::tensor({7, -1}, torch::kInt)},
                               {"c", torch::tensor({1, 2, 3, 4}, torch::kByte).reshape({2, 2})},
                               {"d", torch::tensor(1.0).to(torch::kHalf)},
                               {"e", torch::tensor({1.0}).to(torch::kBFloat16)},
                               {"f", torch::tensor({true, false})},
                               {"g", torch::zeros({0}, torch::kLong)}});
  EXPECT_EQ(loaded.metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hand made"}}));
}

// ---- corrupt files --------------------------------------------------------------------------

TEST(SafetensorsCorruptTest, MissingFile) {
  TempDir dir;
  try {
    load_safetensors(dir.file("nope"));
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("nope")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsCorruptTest, FileShorterThanEightBytes) {
  expect_data_error("", {"0 bytes", "8-byte"});
  expect_data_error(std::string("\x02\x00\x00", 3), {"3 bytes"});
}

TEST(SafetensorsCorruptTest, HeaderLongerThanFile) {
  expect_data_error(le64(1000) + "{}", {"header length 1000", "truncated"});
}

TEST(SafetensorsCorruptTest, HeaderOverLimit) {
  expect_data_error(le64(200'000'000) + "{}", {"header length 200000000", "limit"});
  expect_data_error(le64(std::numeric_limits<uint64_t>::max()) + "{}", {"limit"});
}

TEST(SafetensorsCorruptTest, HeaderNotJson) {
  expect_data_error(file_of("{\"w\": ", ""), {"not valid JSON"});
  expect_data_error(file_of("[1, 2]", ""), {"JSON object"});
}

TEST(SafetensorsCorruptTest, EntryMalformed) {
  expect_data_error(file_of(R"({"w": 3})", ""), {"tensor 'w'", "must be an object"});
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [0]}})", ""),
                    {"tensor 'w'", "missing \"data_offsets\""});
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})",
                            std::string(8, '\0')),
                    {"tensor 'w'", "\"shape\" must be an array"});
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, "4"]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "data_offsets"});
}

TEST(SafetensorsCorruptTest, UnknownDtype) {
  expect_data_error(
      file_of(R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", "\x01"),
      {"tensor 'w'", "unsupported dtype \"F8_E4M3\""});
  expect_data_error(file_of(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 1]}})", "\x01"),
                    {"tensor 'w'", "unsupported dtype"});
}

TEST(SafetensorsCorruptTest, BadShapeEntries) {
  expect_data_error(
      file_of(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", ""),
      {"tensor 'w'", "negative"});
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "non-negative integers"});
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})",
                            std::string(8, '\0')),
                    {"tensor 'w'", "non-negative integers"});
}

TEST(SafetensorsCorruptTest, ElementCountOverflow) {
  expect_data_error(
      file_of(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296],)"
              R"( "data_offsets": [0, 4]}})",
              std::string(4, '\0')),
      {"tensor 'w'", "overflows"});
  // 2^62 elements fit in int64, their 2^64 bytes do not.
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [4611686018427387904],)"
                            R"( "data_offsets": [0, 4]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "overflows"});
}

// The size claim is checked against the file before anything is allocated: were it not, this
// would try to allocate 4 EiB and fail with something other than DataError.
TEST(SafetensorsCorruptTest, HugeShapeClaimDoesNotAllocate) {
  expect_data_error(file_of(R"({"w": {"dtype": "I8", "shape": [4611686018427387904],)"
                            R"( "data_offsets": [0, 4611686018427387904]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "past the end"});
  expect_data_error(file_of(R"({"w": {"dtype": "I8", "shape": [4611686018427387904],)"
                            R"( "data_offsets": [0, 4]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "needs 4611686018427387904"});
}

TEST(SafetensorsCorruptTest, ReversedOffsets) {
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "reversed"});
}

TEST(SafetensorsCorruptTest, OffsetsPastEndOfFile) {
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "past the end", "truncated"});
}

TEST(SafetensorsCorruptTest, ByteRangeDoesNotMatchShape) {
  expect_data_error(file_of(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
                            std::string(4, '\0')),
                    {"tensor 'w'", "hold 4 bytes", "needs 8"});
}

TEST(SafetensorsCorruptTest, OverlappingOffsets) {
  expect_data_error(file_of(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                            R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                            std::string(12, '\0')),
                    {"tensor 'b'", "overlap", "tensor 'a'"});
}

TEST(SafetensorsCorruptTest, GapBetweenTensors) {
  expect_data_error(file_of(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                            R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                            std::string(12, '\0')),
                    {"tensor 'b'", "gap of 4 bytes"});
}

TEST(SafetensorsCorruptTest, TrailingBytes) {
  expect_data_error(file_of(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                            std::string(8, '\0')),
                    {"4 bytes after the last tensor"});
}

TEST(SafetensorsCorruptTest, MetadataNotStrings) {
  expect_data_error(file_of(R"({"__metadata__": {"step": 3}})", ""), {"metadata 'step'"});
  expect_data_error(file_of(R"({"__metadata__": [1]})", ""), {"__metadata__"});
}

TEST(SafetensorsCorruptTest, BoolByteOtherThanZeroOrOne) {
  expect_data_error(file_of(R"({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})",
                            std::string("\x01\x02", 2)),
                    {"tensor 'm'", "BOOL"});
}

// ---- writer errors --------------------------------------------------------------------------

TEST(SafetensorsTest, RejectsBadNamesAndDtypesWithoutWriting) {
  TempDir dir;
  std::string path = dir.file("a");
  auto t = torch::zeros({1});
  EXPECT_THROW(save_safetensors(path, {{"w", t}, {"w", t}}), InvalidArgument);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", t}}), InvalidArgument);
  EXPECT_THROW(save_safetensors(path, {{"", t}}), InvalidArgument);
  EXPECT_THROW(save_safetensors(path, {{"w", torch::Tensor()}}), InvalidArgument);
  try {
    save_safetensors(path, {{"z", torch::zeros({2}, torch::kComplexFloat)}});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'z'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ComplexFloat"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(SafetensorsTest, ReplacesAnExistingFileWhole) {
  TempDir dir;
  std::string path = dir.file("a");
  save_safetensors(path, {{"w", torch::ones({1000})}});
  save_safetensors(path, {{"v", torch::tensor({2.0f})}});
  expect_same(load_safetensors(path).tensors, {{"v", torch::tensor({2.0f})}});
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"a"});
}

TEST(SafetensorsTest, MissingDirectoryNamesPathAndReason) {
  TempDir dir;
  std::string path = dir.file("no/such/dir/a.safetensors");
  try {
    save_safetensors(path, {{"w", torch::ones({1})}});
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
}

// The file system refuses the final rename (here by an Env that fails it, as a full or
// read-only file system would): the error names the path, and the temporary file is removed.
class FailingRenameEnv : public EnvWrapper {
 public:
  FailingRenameEnv() : EnvWrapper(Env::Default()) {}
  void rename_file(const std::string& from, const std::string& to) override {
    throw DataError("renaming '" + from + "' to '" + to + "' failed: Read-only file system");
  }
};

TEST(SafetensorsTest, FailedRenameRemovesTheTempFile) {
  TempDir dir;
  const std::string path = dir.file("weights.safetensors");
  FailingRenameEnv env;
  try {
    save_safetensors(path, {{"w", torch::ones({4})}}, {}, &env);
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("renaming"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

// A target that exists and is not a regular file (a directory here; a device node or FIFO named
// by mistake alike) is refused before anything is written: the rename would replace it.
TEST(SafetensorsTest, ATargetThatIsNotARegularFileIsRefusedAndLeftAsItWas) {
  TempDir dir;
  const std::string path = dir.file("taken");
  std::filesystem::create_directory(path);
  try {
    save_safetensors(path, {{"w", torch::ones({4})}});
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"taken"});
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

}  // namespace
}  // namespace dist
