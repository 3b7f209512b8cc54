// SummaryWriter: scalar summaries in TensorBoard's event-file format, so `tensorboard --logdir`
// (or any TFRecord reader) plots training curves written from C++.
//
// File: LOG_DIR/events.out.tfevents.<seconds>.<host>.<pid>, a TFRecord stream: each record is
// its length (uint64 LE), the masked CRC-32C of those 8 bytes, the bytes of one Event protocol
// buffer, and their masked CRC-32C. The first Event carries file_version "brain.Event:2"; each
// scalar is an Event{wall_time, step, summary{value{tag, simple_value}}}. Written by hand in
// protobuf wire format: three messages need no protobuf library.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace dist {

class SummaryWriter {
 public:
  // Creates log_dir if needed and a new event file in it (Error naming it if that fails).
  explicit SummaryWriter(const std::string& log_dir);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  // Pushes what was written to the file (TensorBoard reads while training runs).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::ofstream out_;
};

}  // namespace dist
