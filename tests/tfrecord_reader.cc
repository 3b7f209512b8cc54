#include "tfrecord_reader.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <regex>

#include "test_util.h"

namespace dist::testing {
namespace {

template <class T>
T read_le(const std::string& bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

std::string protoc(const std::string& arguments, const std::string& message,
                   const std::string& work_dir) {
  const std::string file = work_dir + "/event.bin";
  write_file(file, message);
  FILE* pipe = popen(("protoc " + arguments + " < " + file + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string out;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  return status == 0 ? out : "protoc failed (install protobuf-compiler): " + out;
}

}  // namespace

// Bit by bit, straight from the definition (reflected polynomial 0x82F63B78).
uint32_t reference_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

uint32_t reference_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::vector<std::string> read_tfrecords(const std::string& path, std::string* error) {
  const std::string bytes = read_file(path);
  std::vector<std::string> records;
  for (size_t at = 0; at < bytes.size();) {
    if (at + 12 > bytes.size()) return *error = "truncated record header", records;
    const auto length = read_le<uint64_t>(bytes, at);
    if (read_le<uint32_t>(bytes, at + 8) != reference_mask(reference_crc32c(bytes.substr(at, 8))))
      return *error = "bad length checksum at byte " + std::to_string(at), records;
    if (at + 12 + length + 4 > bytes.size()) return *error = "truncated record", records;
    std::string record = bytes.substr(at + 12, length);
    if (read_le<uint32_t>(bytes, at + 12 + length) != reference_mask(reference_crc32c(record)))
      return *error = "bad data checksum at byte " + std::to_string(at), records;
    records.push_back(std::move(record));
    at += 12 + length + 4;
  }
  return records;
}

std::string decode_raw(const std::string& message, const std::string& work_dir) {
  return protoc("--decode_raw", message, work_dir);
}

std::string decode_event(const std::string& message, const std::string& work_dir) {
  const std::string schema = DIST_SOURCE_DIR "/tests/data/tensorboard";
  return protoc("--decode=tensorflow.Event --proto_path=" + schema + " " + schema + "/event.proto",
                message, work_dir);
}

std::vector<ScalarEvent> read_scalar_events(const std::string& path, const std::string& work_dir,
                                            std::string* error) {
  std::vector<ScalarEvent> events;
  // Event{2: step, 5: summary{1: value{1: tag, 2: simple_value (fixed32)}}}.
  static const std::regex step(R"re((?:^|\n)2: (\d+)\n)re");
  static const std::regex tag(R"re(1: "([^"]*)")re");
  // 8 hex digits: a fixed32 (a histogram's doubles print 16, and are no scalar).
  static const std::regex value(R"re(2: 0x([0-9a-f]{8})\n)re");
  for (const std::string& record : read_tfrecords(path, error)) {
    const std::string text = decode_raw(record, work_dir);
    std::smatch s, t, v;
    if (!std::regex_search(text, t, tag) || !std::regex_search(text, v, value)) continue;
    ScalarEvent event;
    event.tag = t[1];
    if (std::regex_search(text, s, step)) event.step = std::stoll(s[1]);
    const auto bits = static_cast<uint32_t>(std::stoul(v[1], nullptr, 16));
    std::memcpy(&event.value, &bits, sizeof bits);
    events.push_back(event);
  }
  return events;
}

std::vector<HistogramEvent> read_histogram_events(const std::string& path,
                                                  const std::string& work_dir, std::string* error) {
  std::vector<HistogramEvent> events;
  static const std::regex tag(R"re(tag: "([^"]*)")re"), step(R"re((?:^|\n)step: (\d+)\n)re");
  for (const std::string& record : read_tfrecords(path, error)) {
    HistogramEvent event;
    event.text = decode_event(record, work_dir);
    std::smatch t, s;
    if (event.text.find("histo {") == std::string::npos || !std::regex_search(event.text, t, tag))
      continue;
    event.tag = t[1];
    // proto3 leaves a zero out: no "step:" line at step 0.
    if (std::regex_search(event.text, s, step)) event.step = std::stoll(s[1]);
    events.push_back(std::move(event));
  }
  return events;
}

}  // namespace dist::testing
