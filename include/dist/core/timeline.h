// Timeline: a trace of where each step's time goes, in the Chrome trace event format (a JSON
// file that https://ui.perfetto.dev and chrome://tracing open), after Horovod's timeline and
// PyTorch's profiler traces. One file per process; the library records its steps, replicas'
// phases and collectives, and your own phases go in the same file. Off, a span costs one
// relaxed atomic load.
//
//   dist::start_timeline({"trace.json", "worker:0", 0});   // before the strategy's first step
//   { dist::TimelineSpan span("my phase"); ... }            // ... train ...
//   dist::stop_timeline();                                  // writes trace.json
//
// What each span means and how to read a step: docs/guide.md, "A timeline of each step"; why
// it is recorded so: docs/design.md, "The timeline".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace dist {

struct TimelineOptions {
  std::string path;          // the JSON file stop_timeline() writes (atomically)
  std::string process_name;  // the row's title, e.g. "worker:1"; empty: "process"
  int process_id = 0;        // the row's id in a merged file, e.g. the worker's index
  // Spans kept at most; past it the oldest are kept and the rest counted (the file says how
  // many were dropped). About 100 bytes each.
  int64_t max_events = 4'000'000;
};

// Starts recording. InvalidArgument if a recording is in progress or the path is empty; the
// path's directory must exist (checked here, so a long run does not fail at its end).
void start_timeline(const TimelineOptions& options);

// Stops recording and writes the file; returns how many spans it holds. Does nothing (returns
// 0) when no recording is in progress.
int64_t stop_timeline();

namespace detail {
extern std::atomic<bool> timeline_recording;
}  // namespace detail

// Whether a recording is in progress (cheap: one relaxed atomic load).
inline bool timeline_recording() {
  return detail::timeline_recording.load(std::memory_order_relaxed);
}

// A span of this thread: from construction to destruction. `name` and `category` must outlive
// the recording (string literals). An integer argument shows in the span's details.
class TimelineSpan {
 public:
  explicit TimelineSpan(const char* name, const char* category = "user")
      : name_(name), category_(category) {
    if (timeline_recording()) start_ = std::chrono::steady_clock::now();
  }
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;
  ~TimelineSpan();

  // Up to two integer arguments; the ones past that are ignored.
  void arg(const char* key, int64_t value);

 private:
  const char* name_;
  const char* category_;
  std::chrono::steady_clock::time_point start_{};  // the epoch: not recording at construction
  const char* keys_[2] = {nullptr, nullptr};
  int64_t values_[2] = {0, 0};
};

}  // namespace dist
