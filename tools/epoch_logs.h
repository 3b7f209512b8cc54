// What the custom loop reports of each epoch: its line on the chief's output, and with
// --log-dir LOG_DIR/metrics.jsonl and TensorBoard scalars as fit's TensorBoard callback writes
// them (LOG_DIR/train and LOG_DIR/validation, the test set; tags epoch_<metric>, step = the
// epoch from 0). Only the chief makes one with files: two workers never write the same file.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "dist/core/env.h"
#include "dist/train/summary_writer.h"
#include "train_options.h"
#include "train_result.h"

namespace dist::tools {

// `value` with `digits` after the point, as the job's lines print figures.
std::string fixed(double value, int digits);

class EpochLogs {
 public:
  // Opens the files of --log-dir when `chief` (appended through the Env, which refuses anything
  // but a regular file: checked before training too, job_outputs.h).
  EpochLogs(const TrainOptions& options, bool chief, std::ostream& out);

  // The epoch's line, metrics.jsonl line and scalars: `r`'s losses and metrics (named
  // r.metric_name), the epoch's seconds and examples per second of training.
  void report(int epoch, const TrainResult& r, double epoch_seconds, double per_second);
  // LOG_DIR/train's writer, for the weights' histograms (null without --log-dir or off the
  // chief).
  SummaryWriter* train_summary() { return train_summary_ ? &*train_summary_ : nullptr; }
  // Makes what the epoch wrote durable.
  void flush();

 private:
  std::ostream& out_;
  std::string unit_;  // "images/s" or, for --features, "examples/s"
  std::unique_ptr<WritableFile> metrics_log_;
  std::optional<SummaryWriter> train_summary_, validation_summary_;
};

}  // namespace dist::tools
