// SummaryWriter's event files, read back by an independent decoder: the TFRecord framing and
// its checksums are checked here with a bitwise CRC-32C written for the test, and each Event
// is decoded by protoc --decode_raw (protobuf-compiler).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/train/image_io.h"
#include "dist/train/summary_writer.h"
#include "png_reader.h"
#include "test_envs.h"
#include "test_util.h"
#include "tfrecord_reader.h"

namespace dist {
namespace {

using testing::decode_raw;
using testing::read_tfrecords;
using testing::reference_crc32c;
using testing::reference_mask;

template <class T>
T read_le(const std::string& bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

TEST(SummaryWriterTest, EventFileHoldsTheScalarsInTensorBoardFormat) {
  testing::TempDir dir;
  std::string path;
  {
    SummaryWriter writer(dir.file("logs"));
    writer.scalar("loss", 0.5, 5);
    writer.scalar("accuracy", 0.75, 6);
    path = writer.path();
  }
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::string bytes = testing::read_file(path);

  std::vector<std::string> events;
  for (size_t at = 0; at < bytes.size();) {
    ASSERT_LE(at + 12, bytes.size()) << "truncated record header";
    const auto length = read_le<uint64_t>(bytes, at);
    EXPECT_EQ(read_le<uint32_t>(bytes, at + 8),
              reference_mask(reference_crc32c(bytes.substr(at, 8))));
    ASSERT_LE(at + 12 + length + 4, bytes.size()) << "truncated record";
    const std::string event = bytes.substr(at + 12, length);
    EXPECT_EQ(read_le<uint32_t>(bytes, at + 12 + length), reference_mask(reference_crc32c(event)));
    events.push_back(event);
    at += 12 + length + 4;
  }
  ASSERT_EQ(events.size(), 3u);
  EXPECT_NE(decode_raw(events[0], dir.path()).find("3: \"brain.Event:2\""), std::string::npos)
      << decode_raw(events[0], dir.path());
  const std::string loss = decode_raw(events[1], dir.path());
  EXPECT_NE(loss.find("2: 5\n"), std::string::npos) << loss;         // step
  EXPECT_NE(loss.find("1: \"loss\""), std::string::npos) << loss;    // tag
  EXPECT_NE(loss.find("2: 0x3f000000"), std::string::npos) << loss;  // simple_value 0.5f
  const std::string accuracy = decode_raw(events[2], dir.path());
  EXPECT_NE(accuracy.find("2: 6\n"), std::string::npos) << accuracy;
  EXPECT_NE(accuracy.find("1: \"accuracy\""), std::string::npos) << accuracy;
  EXPECT_NE(accuracy.find("2: 0x3f400000"), std::string::npos) << accuracy;  // 0.75f
}

TEST(SummaryWriterTest, WritesThroughTheGivenEnv) {
  testing::TempDir dir;
  testing::RecordingEnv env(dir.path());
  std::string path;
  {
    SummaryWriter writer(dir.file("logs"), &env);
    writer.scalar("loss", 0.5, 5);
    writer.flush();
    path = writer.path();
  }
  const auto ops = env.operations();
  ASSERT_GE(ops.size(), 3u);
  const std::string name = "logs/" + std::filesystem::path(path).filename().string();
  const std::string shown = name.substr(0, name.rfind('.')) + ".<pid>";
  EXPECT_EQ(ops[0], "create_dirs logs");
  EXPECT_EQ(ops[1], "new_writable_file " + shown);
  EXPECT_EQ(ops.back(), "close " + shown);
  EXPECT_NE(std::find(ops.begin(), ops.end(), "flush " + shown), ops.end());
  EXPECT_EQ(env.appended(path), testing::read_file(path));
  EXPECT_GT(testing::read_file(path).size(), 0u);
}

TEST(SummaryWriterTest, AFailedWriteNamesTheFile) {
  testing::TempDir dir;
  testing::DiskFullEnv full(64);  // the first event fits
  SummaryWriter writer(dir.file("logs"), &full);
  try {
    writer.scalar("a_long_tag_that_does_not_fit_in_what_is_left_of_the_disk", 1.0, 1);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(writer.path()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
}

// Undoes the C escapes protoc --decode_raw prints bytes fields with (octal \ooo, \n, \").
std::string unescape(const std::string& text) {
  std::string bytes;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      bytes += text[i];
      continue;
    }
    const char c = text[++i];
    if (c >= '0' && c <= '7') {
      int value = 0, digits = 0;
      for (; digits < 3 && i < text.size() && text[i] >= '0' && text[i] <= '7'; ++digits, ++i)
        value = value * 8 + (text[i] - '0');
      --i;
      bytes += static_cast<char>(value);
    } else if (c == 'x') {
      bytes += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      bytes += c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;  // \" \' \\ as themselves
    }
  }
  return bytes;
}

struct DecodedImageEvent {
  std::string tag;
  int64_t step = -1, height = -1, width = -1, colorspace = -1;
  std::string encoded;
};

// Event{2: step, 5: summary{1: value{1: tag, 4: image{1: height, 2: width, 3: colorspace,
// 4: encoded_image_string}}}}, as protoc --decode_raw prints it.
DecodedImageEvent decode_image_event(const std::string& text) {
  static const std::regex pattern(
      R"re(\n2: (\d+)\n5 \{\n  1 \{\n    1: "([^"]*)"\n    4 \{\n      1: (\d+)\n      2: (\d+)\n      3: (\d+)\n      4: "((?:[^"\\]|\\.)*)"\n    \}\n  \}\n\})re");
  DecodedImageEvent event;
  std::smatch m;
  if (!std::regex_search(text, m, pattern)) return event;
  event.step = std::stoll(m[1]);
  event.tag = m[2];
  event.height = std::stoll(m[3]);
  event.width = std::stoll(m[4]);
  event.colorspace = std::stoll(m[5]);
  event.encoded = unescape(m[6]);
  return event;
}

TEST(SummaryWriterTest, ImageEventsHoldAPngInTensorBoardFormat) {
  testing::TempDir dir;
  torch::manual_seed(7);
  const auto rgb = torch::randint(0, 256, {3, 5, 7}, torch::kLong).to(torch::kUInt8);
  const auto grey = torch::randint(0, 256, {4, 6}, torch::kLong).to(torch::kUInt8);
  const auto rgba = torch::randint(0, 256, {4, 2, 3}, torch::kLong).to(torch::kUInt8);
  std::string path;
  {
    SummaryWriter writer(dir.file("logs"));
    writer.image("samples/rgb", rgb, 4);
    writer.scalar("loss", 0.5, 4);
    writer.image("grey", grey, 5);
    writer.image("rgba", rgba, 6);
    path = writer.path();
  }
  std::string error;
  const auto records = read_tfrecords(path, &error);
  ASSERT_EQ(error, "");
  ASSERT_EQ(records.size(), 5u);  // the file version, then one record per call

  const std::string loss = decode_raw(records[2], dir.path());
  EXPECT_NE(loss.find("1: \"loss\""), std::string::npos) << loss;
  EXPECT_NE(loss.find("2: 0x3f000000"), std::string::npos) << loss;

  struct Expected {
    size_t record;
    std::string tag;
    int64_t step, colorspace;
    at::Tensor image;
  };
  for (const auto& e : std::vector<Expected>{
           {1, "samples/rgb", 4, 3, rgb}, {3, "grey", 5, 1, grey}, {4, "rgba", 6, 4, rgba}}) {
    const std::string text = decode_raw(records[e.record], dir.path());
    const DecodedImageEvent event = decode_image_event(text);
    SCOPED_TRACE(e.tag);
    ASSERT_EQ(event.tag, e.tag) << text;
    EXPECT_EQ(event.step, e.step);
    EXPECT_EQ(event.height, e.image.size(-2));
    EXPECT_EQ(event.width, e.image.size(-1));
    EXPECT_EQ(event.colorspace, e.colorspace);
    EXPECT_EQ(event.encoded.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)), 0);
    EXPECT_EQ(event.encoded.size(), encode_png(e.image).size());
    // The PNG itself, through the test's own decoder.
    const auto png = testing::decode_png(event.encoded, &error);
    ASSERT_EQ(error, "");
    EXPECT_EQ(png.width, static_cast<uint32_t>(e.image.size(-1)));
    EXPECT_EQ(png.height, static_cast<uint32_t>(e.image.size(-2)));
    auto hwc =
        (e.image.dim() == 2 ? e.image.unsqueeze(0) : e.image).permute({1, 2, 0}).contiguous();
    EXPECT_EQ(png.pixels,
              std::vector<uint8_t>(hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel()));
  }
}

TEST(SummaryWriterTest, ABadImageWritesNothing) {
  testing::TempDir dir;
  SummaryWriter writer(dir.file("logs"));
  const auto before = testing::read_file(writer.path());
  EXPECT_THROW(writer.image("x", torch::zeros({3, 4, 4}), 1), InvalidArgument);  // float
  EXPECT_THROW(writer.image("x", torch::zeros({2, 4, 4}, torch::kUInt8), 1), InvalidArgument);
  writer.flush();
  EXPECT_EQ(testing::read_file(writer.path()), before);
}

// A histogram event decoded with TensorBoard's schema (tests/data/tensorboard/event.proto).
struct DecodedHistogram {
  std::string text;  // protoc's text format, for messages
  double min = 0, max = 0, num = -1, sum = 0, sum_squares = 0;
  std::vector<double> limits, buckets;
};

DecodedHistogram decode_histogram(const std::string& event, const std::string& work_dir) {
  DecodedHistogram h;
  h.text = testing::decode_event(event, work_dir);
  auto field = [&](const std::string& name) {
    std::vector<double> values;
    const std::regex pattern("\\n *" + name + ": (\\S+)");
    for (std::sregex_iterator it(h.text.begin(), h.text.end(), pattern), end; it != end; ++it)
      values.push_back(std::stod((*it)[1]));
    return values;
  };
  auto one = [&](const std::string& name) {
    auto values = field(name);
    return values.empty() ? 0.0 : values[0];  // proto3 leaves zeros out
  };
  h.min = one("min");
  h.max = one("max");
  h.num = one("num");
  h.sum = one("sum");
  h.sum_squares = one("sum_squares");
  h.limits = field("bucket_limit");
  h.buckets = field("bucket");
  return h;
}

// Each value lies in the bucket of the first limit above it, that limit is a default edge
// (0, +-DBL_MAX, or +-1e-12 x 1.1^k) no more than 1.1x away from the value, and the counts sum
// to the element count.
void expect_histogram_of(const DecodedHistogram& h, const std::vector<double>& values) {
  ASSERT_EQ(h.limits.size(), h.buckets.size()) << h.text;
  ASSERT_FALSE(h.limits.empty()) << h.text;
  EXPECT_TRUE(std::is_sorted(h.limits.begin(), h.limits.end())) << h.text;
  EXPECT_EQ(h.num, static_cast<double>(values.size())) << h.text;
  std::vector<double> expected(h.limits.size(), 0.0);
  for (double v : values) {
    const size_t b = std::upper_bound(h.limits.begin(), h.limits.end(), v) - h.limits.begin();
    ASSERT_LT(b, h.limits.size()) << v;
    expected[b] += 1;
  }
  for (size_t b = 0; b < h.limits.size(); ++b) {
    if (h.buckets[b] == 0) continue;
    const double limit = h.limits[b];
    if (limit != 0 && std::abs(limit) != DBL_MAX) {
      const double k = std::log(std::abs(limit) / 1e-12) / std::log(1.1);
      EXPECT_NEAR(k, std::round(k), 1e-6) << "limit " << limit << " is no default edge";
    }
  }
  EXPECT_EQ(h.buckets, expected) << h.text;
  // Runs of empty buckets are merged: no two in a row, so at most one between nonempty ones.
  size_t nonempty = 0;
  for (size_t b = 0; b < h.buckets.size(); ++b) {
    nonempty += h.buckets[b] > 0;
    if (b > 0) {
      EXPECT_FALSE(h.buckets[b] == 0 && h.buckets[b - 1] == 0) << "bucket " << b;
    }
  }
  EXPECT_LE(h.buckets.size(), 2 * nonempty + 1) << h.text;
  double in_buckets = 0;
  for (double c : h.buckets) in_buckets += c;
  EXPECT_EQ(in_buckets, static_cast<double>(values.size()));
}

TEST(SummaryWriterTest, HistogramsDecodeWithTensorBoardsSchema) {
  testing::TempDir dir;
  torch::manual_seed(11);
  const auto weights = torch::randn({40, 25}) * 0.05;
  const auto few = torch::tensor({-2.5, 0.0, 0.0, 1e-13, 0.5, 3.0}, torch::kDouble);
  std::string path;
  {
    SummaryWriter writer(dir.file("logs"));
    writer.histogram("dense/weight", weights, 3);
    writer.histogram("few", few.to(torch::kBFloat16), 4);  // any dtype, read as double
    writer.histogram("empty", torch::zeros({0}), 5);
    try {
      writer.histogram("diverged", torch::tensor({1.0, std::nan("")}), 6);
      ADD_FAILURE() << "a NaN was written";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'diverged'"), std::string::npos) << e.what();
    }
    path = writer.path();
  }
  std::string error;
  const auto events = testing::read_tfrecords(path, &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(events.size(), 4u);  // the file version, then three histograms: none for the NaN

  const auto dense = decode_histogram(events[1], dir.path());
  EXPECT_NE(dense.text.find("step: 3"), std::string::npos) << dense.text;
  EXPECT_NE(dense.text.find("tag: \"dense/weight\""), std::string::npos) << dense.text;
  const auto flat = weights.to(torch::kDouble).reshape(-1);
  const std::vector<double> values(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
  EXPECT_EQ(dense.min, *std::min_element(values.begin(), values.end()));
  EXPECT_EQ(dense.max, *std::max_element(values.begin(), values.end()));
  EXPECT_NEAR(dense.sum, flat.sum().item<double>(), 1e-9);
  EXPECT_NEAR(dense.sum_squares, (flat * flat).sum().item<double>(), 1e-9);
  expect_histogram_of(dense, values);

  const auto small = decode_histogram(events[2], dir.path());
  const auto rounded = few.to(torch::kBFloat16).to(torch::kDouble);
  const std::vector<double> few_values(rounded.data_ptr<double>(), rounded.data_ptr<double>() + 6);
  EXPECT_EQ(small.min, -2.5);
  EXPECT_EQ(small.max, 3.0);
  expect_histogram_of(small, few_values);
  // The two zeros and 1e-13 share the bucket below the smallest positive edge, 1e-12.
  const auto zero_bucket = std::upper_bound(small.limits.begin(), small.limits.end(), 0.0);
  ASSERT_NE(zero_bucket, small.limits.end());
  EXPECT_DOUBLE_EQ(*zero_bucket, 1e-12);
  EXPECT_EQ(small.buckets[zero_bucket - small.limits.begin()], 3.0);

  const auto empty = decode_histogram(events[3], dir.path());
  EXPECT_EQ(empty.num, 0.0);
  EXPECT_EQ(empty.limits, (std::vector<double>{DBL_MAX}));
  EXPECT_EQ(empty.buckets, (std::vector<double>{0.0}));
}

}  // namespace
}  // namespace dist
