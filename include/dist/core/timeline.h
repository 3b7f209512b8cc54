// Timeline: a trace of where each step's time goes, in the Chrome trace event format (a JSON
// file that https://ui.perfetto.dev and chrome://tracing open), after Horovod's timeline and
// PyTorch's profiler traces.
//
//   dist::start_timeline({"trace.json", "worker:0", 0});   // before the strategy's first step
//   ... train ...
//   dist::stop_timeline();                                  // writes trace.json
//
// One file per process: under MultiWorkerMirroredStrategy each worker records its own, named
// apart by the caller (dist-train --timeline FILE inserts the task: FILE.worker-1.json);
// scripts/merge_timelines.py puts them side by side in one file, one process row per worker.
// Timestamps are the system clock's, so the files of one machine, or of hosts whose clocks
// agree (NTP), line up.
//
// What the library records, per thread (the loop's thread, each replica's thread):
//   - "step" (a StepRunner's step: keras fit and dist-train), with inside it "data" (waiting
//     for the next global batch);
//   - per replica, "dispatch" (from strategy.run handing the step to the replica's thread
//     until that thread starts it: waiting for a core, mostly), "forward" (from the replica's
//     function until autograd runs its first backward function), "backward" (until the last
//     one ends) and "after backward" (the rest of the replica's function), which holds
//     "apply_gradients", inside which "optimizer" spans (the step of one pack, or of all
//     parameters at once); on the loop's thread "settle" (after the replicas);
//   - "issue": a thread's call that starts a collective with the other workers (all of it,
//     where the workers share memory); "wait": a thread blocked on one; "agreement": the
//     round trip in which the workers check that they issue the same collective; "join": the
//     loop's thread waking up after the replicas finished;
//   - "gather layer" (sharding 'parameters': a layer's parameters gathered for its forward or
//     backward), "checkpoint" (writing one), "commit" (an elastic job keeping its state);
// and on the process's "collectives" track each collective between the workers from its
// issue until a thread saw it complete: its kind, payload bytes, the bytes this worker sends
// for it (CommunicationCounters' definitions), its peers and its algorithm.
//
// Off, recording costs one relaxed atomic load per span (none of the work above is done).
// Your own phases go in the same file: { dist::TimelineSpan span("my phase"); ... }.
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
