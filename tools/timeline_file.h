// dist-train --timeline: which file this process writes and under which row.
#pragma once

#include "dist/core/timeline.h"
#include "train_options.h"

namespace dist::tools {

// A job of one process writes --timeline's FILE as given. A task of a cluster (multi_worker,
// parameter_server) writes FILE with its task inserted before the extension
// ("trace.json" -> "trace.worker-1.json"), as row `task_row`: the chief and the workers in
// rank order from 0, then the ps tasks from 1000 and the evaluator at 2000, so that the rows of
// scripts/merge_timelines.py's file are in that order.
TimelineOptions timeline_options(const TrainOptions& options);

// Records a timeline from construction to destruction when --timeline is given: the file is
// written also when training fails, since a trace of the failing job is what one wants then.
class TimelineRecording {
 public:
  explicit TimelineRecording(const TrainOptions& options);
  TimelineRecording(const TimelineRecording&) = delete;
  TimelineRecording& operator=(const TimelineRecording&) = delete;
  ~TimelineRecording();

 private:
  bool recording_ = false;
};

}  // namespace dist::tools
