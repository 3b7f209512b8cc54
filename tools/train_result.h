// What a dist-train job reports: its figures, and the one-line JSON object dist-train prints
// last (docs/dist-train.md lists its fields).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/collective/communication_counters.h"

namespace dist::tools {

struct TrainResult {
  bool chief = true;  // false on the other workers of a multi-worker job
  std::string strategy;
  int num_replicas_in_sync = 0;
  int64_t global_batch = 0;
  int epochs = 0;
  int64_t steps = 0;
  double seconds = 0;         // wall time of the whole job, evaluation included
  double train_seconds = 0;   // time in training steps only
  double images_per_sec = 0;  // training images / train_seconds
  // What train_metric and test_metric are, as Keras names it: "accuracy" or "mae"; the JSON
  // line's keys are train_<name> and test_<name>.
  std::string metric_name = "accuracy";
  double train_loss = 0;
  double train_metric = 0;  // accuracy, or the mean absolute error (--task regress)
  double test_loss = 0;
  double test_metric = 0;
  int64_t resumed_at_step = -1;             // the checkpoint's step when the run resumed; -1: fresh
  bool interrupted = false;                 // stopped by SIGTERM/SIGINT after the current step
  std::string last_checkpoint;              // path of the last checkpoint written (chief), if any
  std::string mixed_precision = "float32";  // the policy's Keras name
  // Multi-worker: bytes this worker sent to the others per step of this run, by the library's
  // count (communication_counters.h); 0 otherwise.
  int64_t bytes_sent_per_step = 0;
  // What this process handed to the collectives between the workers and sent for them over
  // the whole job, by the library's count (a --timeline's collectives add up to it).
  CommunicationCounters communication;
  // The peak resident memory (VmHWM) of the largest worker of a synchronous job, else of this
  // process, in bytes.
  int64_t peak_rss_bytes = 0;
  // An elastic job: the workers of each generation, in order ([3, 2, 3]); empty otherwise.
  std::vector<int> worker_sizes;
  // An elastic generation that ended at a step boundary because workers join (the job goes on
  // in the next generation).
  bool regroup = false;
  // --ignore-errors: the records and images skipped (by all workers); -1 without the flag.
  int64_t ignored_errors = -1;
};

// The result as the one-line JSON object dist-train prints last.
std::string to_json_line(const TrainResult& result);

}  // namespace dist::tools
