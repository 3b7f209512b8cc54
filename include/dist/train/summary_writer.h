// SummaryWriter: scalar and image summaries in TensorBoard's event-file format, so
// `tensorboard --logdir` (or any TFRecord reader) plots training curves and shows images
// written from C++.
//
// File: LOG_DIR/events.out.tfevents.<seconds>.<host>.<pid>, a TFRecord stream: each record is
// its length (uint64 LE), the masked CRC-32C of those 8 bytes, the bytes of one Event protocol
// buffer, and their masked CRC-32C. The first Event carries file_version "brain.Event:2"; each
// scalar is an Event{wall_time, step, summary{value{tag, simple_value}}}, each image an
// Event{wall_time, step, summary{value{tag, image{height, width, colorspace, PNG bytes}}}}, each
// histogram an Event{wall_time, step, summary{value{tag, histo{min, max, num, sum, sum_squares,
// bucket_limit, bucket}}}} (TensorBoard's HistogramProto).
// Written by hand in protobuf wire format: five messages need no protobuf library.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/env.h"

namespace dist {

// Not thread-safe: one thread at a time.
class SummaryWriter {
 public:
  // Creates log_dir if needed and a new event file in it, through `env` (not owned; it must
  // outlive the writer). DataError naming the path if that fails.
  explicit SummaryWriter(const std::string& log_dir, Env* env = Env::Default());
  // Closes the file, ignoring errors.
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // Appends one scalar event; DataError naming the file if the write fails.
  void scalar(const std::string& tag, double value, int64_t step);
  // Appends one image event: `image` is uint8 pixels, [H,W] or [C,H,W] with C = 1 (grey), 3
  // (RGB) or 4 (RGBA), stored as PNG (see dist/train/image_io.h for tiling several images and
  // mapping float values). InvalidArgument as encode_png, before anything is written;
  // DataError naming the file if the write fails.
  void image(const std::string& tag, const at::Tensor& image, int64_t step);
  // Appends one histogram event of `values` (any shape and dtype, read as double) over
  // TensorBoard's default bucket edges (TensorFlow's: 0, then +-1e-12 growing by a factor of
  // 1.1 up to 1e20, then +-DBL_MAX; a bucket counts the values from the edge before it up to,
  // not including, its own edge), runs of empty buckets merged into one as TensorFlow writes
  // them. InvalidArgument naming the tag for a NaN or infinite value (TensorFlow 1's
  // histogram op refused them too), before anything is written.
  void histogram(const std::string& tag, const at::Tensor& values, int64_t step);
  // A histogram of each floating-point weight (integer counters are skipped), tagged by layer
  // as Keras groups them ("dense.weight" -> "dense/weight"). A weight with a NaN or infinity
  // gets none: training goes on, and its message is returned (the others are written).
  std::vector<std::string> weight_histograms(
      const std::vector<std::pair<std::string, at::Tensor>>& weights, int64_t step);
  // Hands what was written to the operating system (TensorBoard reads while training runs).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_value(const std::string& summary_value, int64_t step);
  void write_record(const std::string& event);

  std::string path_;
  std::unique_ptr<WritableFile> file_;
};

}  // namespace dist
