// An independent reader of TensorBoard event files for the tests: TFRecord framing checked with
// a bitwise CRC-32C written from the definition, and each Event decoded by
// `protoc --decode_raw` (protobuf-compiler), so the library's own encoder is not trusted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dist::testing {

uint32_t reference_crc32c(const std::string& bytes);
// TFRecord's masked CRC.
uint32_t reference_mask(uint32_t crc);

// The records of a TFRecord file; `error` explains the first framing or checksum problem.
std::vector<std::string> read_tfrecords(const std::string& path, std::string* error);

// protoc --decode_raw of one message (work_dir holds a temporary file).
std::string decode_raw(const std::string& message, const std::string& work_dir);
// One Event decoded as TensorBoard's schema says (tests/data/tensorboard/event.proto), in
// protoc's text format ("step: 3", "histo { min: ... }"), or "protoc failed: ...".
std::string decode_event(const std::string& message, const std::string& work_dir);

struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
};
// The scalar summaries of an event file, decoded as above.
std::vector<ScalarEvent> read_scalar_events(const std::string& path, const std::string& work_dir,
                                            std::string* error);

struct HistogramEvent {
  std::string tag;
  int64_t step = 0;
  std::string text;  // the whole event as decode_event gives it ("histo { min: ... }")
};
// The histogram summaries of an event file, decoded with TensorBoard's schema (decode_event).
std::vector<HistogramEvent> read_histogram_events(const std::string& path,
                                                  const std::string& work_dir, std::string* error);

}  // namespace dist::testing
