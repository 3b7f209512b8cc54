// SummaryWriter's event files, read back by an independent decoder: the TFRecord framing and
// its checksums are checked here with a bitwise CRC-32C written for the test, and each Event
// is decoded by protoc --decode_raw (protobuf-compiler).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dist/train/summary_writer.h"
#include "test_envs.h"
#include "test_util.h"
#include "tfrecord_reader.h"

namespace dist {
namespace {

using testing::decode_raw;
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

}  // namespace
}  // namespace dist
