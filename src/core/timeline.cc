// The timeline's recorder: each thread appends to a buffer of its own (an uncontended lock),
// registered once per recording; stop_timeline() collects them and writes the file.
#include "dist/core/timeline.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "core/timeline_events.h"
#include "core/timeline_recorder.h"
#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/core/output_file.h"

namespace dist {
namespace detail {
std::atomic<bool> timeline_recording{false};
}  // namespace detail

namespace {

using detail::TimelineClock;
using detail::TimelineEvent;

int64_t steady_ns(TimelineClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct ThreadBuffer {
  std::mutex mu;
  int id = 0;
  uint64_t generation = 0;
  std::string name;
  std::vector<TimelineEvent> events;
};

struct Recorder {
  std::mutex mu;  // the fields below
  TimelineOptions options;
  uint64_t generation = 0;
  int next_thread_id = 0;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  int64_t system_anchor_us = 0;
  int64_t steady_anchor_ns = 0;
  at::CallbackHandle backward_callback = 0;
  // Read without the lock by the threads that record.
  std::atomic<uint64_t> current_generation{0};
  std::atomic<int64_t> events{0};
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> max_events{0};
};

// Never destroyed: threads may record while the process exits.
Recorder& recorder() {
  static auto* r = new Recorder;
  return *r;
}

thread_local std::shared_ptr<ThreadBuffer> this_thread_buffer;
thread_local std::string this_thread_name;

// This thread's buffer of the current recording, registered on first use; null if the
// recording ended meanwhile.
ThreadBuffer* buffer_of_this_thread() {
  Recorder& r = recorder();
  const uint64_t generation = r.current_generation.load(std::memory_order_acquire);
  if (this_thread_buffer && this_thread_buffer->generation == generation)
    return this_thread_buffer.get();
  auto buffer = std::make_shared<ThreadBuffer>();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.generation != generation) return nullptr;
  buffer->generation = generation;
  buffer->id = r.next_thread_id++;
  buffer->name = this_thread_name;
  r.buffers.push_back(buffer);
  this_thread_buffer = std::move(buffer);
  return this_thread_buffer.get();
}

void append(const TimelineEvent& event) {
  if (!timeline_recording()) return;
  ThreadBuffer* buffer = buffer_of_this_thread();
  if (buffer == nullptr) return;
  Recorder& r = recorder();
  if (r.events.fetch_add(1, std::memory_order_relaxed) >=
      r.max_events.load(std::memory_order_relaxed)) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(buffer->mu);
  buffer->events.push_back(event);
}

TimelineEvent make_event(const char* name, const char* category, TimelineClock::time_point start,
                         TimelineClock::time_point end, detail::TimelineArgs args,
                         const char* text_key, const char* text) {
  TimelineEvent event;
  event.name = name;
  event.category = category;
  event.start_ns = steady_ns(start);
  event.duration_ns = std::max<int64_t>(0, steady_ns(end) - event.start_ns);
  size_t i = 0;
  for (const auto& [key, value] : args) {
    if (i == 4) break;
    event.keys[i] = key;
    event.values[i++] = value;
  }
  event.text_key = text_key;
  event.text = text;
  return event;
}

// Autograd's backward functions on this thread since the replica's part began (steady ns;
// -1: none yet). Set by a RecordFunction callback while a recording is in progress.
thread_local int64_t first_backward_ns = -1;
thread_local int64_t last_backward_end_ns = -1;

// The end callback is called without a context too (LibTorch 1.13's RecordFunction runs every
// end callback whose start ran): nothing is allocated per backward function.
std::unique_ptr<at::ObserverContext> backward_function_started(const at::RecordFunction&) {
  if (first_backward_ns < 0) first_backward_ns = steady_ns(TimelineClock::now());
  return nullptr;
}

void backward_function_ended(const at::RecordFunction&, at::ObserverContext*) {
  last_backward_end_ns = steady_ns(TimelineClock::now());
}

void check_options(const TimelineOptions& options) {
  DIST_CHECK_ARG(!options.path.empty(), "start_timeline: the path of the timeline file is empty");
  DIST_CHECK_ARG(options.max_events > 0, "start_timeline: max_events is ", options.max_events,
                 "; give a positive count");
  // Checked now, not when the recording is written at its end: a path that cannot take the
  // file (a device, a FIFO, a directory) would lose the whole recording then. A missing
  // directory is created, as for every other output.
  output_file_target(options.path, "start_timeline: the timeline file");
  const auto parent = std::filesystem::path(options.path).parent_path();
  if (!parent.empty()) Env::Default()->create_dirs(parent.string());
}

}  // namespace

void start_timeline(const TimelineOptions& options) {
  check_options(options);
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  DIST_CHECK_ARG(!timeline_recording(), "start_timeline('", options.path,
                 "'): a timeline is already being recorded into '", r.options.path,
                 "'; stop_timeline() first");
  r.options = options;
  r.buffers.clear();
  r.next_thread_id = 0;
  r.events = 0;
  r.dropped = 0;
  r.max_events = options.max_events;
  r.steady_anchor_ns = steady_ns(TimelineClock::now());
  r.system_anchor_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  r.current_generation = ++r.generation;
  r.backward_callback = at::addGlobalCallback(
      at::RecordFunctionCallback(&backward_function_started, &backward_function_ended)
          .scopes({at::RecordScope::BACKWARD_FUNCTION}));
  detail::timeline_recording.store(true, std::memory_order_release);
}

int64_t stop_timeline() {
  Recorder& r = recorder();
  detail::TimelineRecording recording;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!timeline_recording()) return 0;
    detail::timeline_recording.store(false, std::memory_order_release);
    r.current_generation = ++r.generation;
    at::removeCallback(r.backward_callback);
    path = r.options.path;
    recording.process_name = r.options.process_name.empty() ? "process" : r.options.process_name;
    recording.process_id = r.options.process_id;
    recording.system_anchor_us = r.system_anchor_us;
    recording.steady_anchor_ns = r.steady_anchor_ns;
    recording.dropped = r.dropped.load();
    for (const auto& buffer : r.buffers) {
      std::lock_guard<std::mutex> buffer_lock(buffer->mu);
      recording.threads.push_back({buffer->id, buffer->name, std::move(buffer->events)});
    }
    r.buffers.clear();
  }
  return detail::write_timeline(path, recording);
}

TimelineSpan::~TimelineSpan() {
  if (start_ == std::chrono::steady_clock::time_point{}) return;
  append(make_event(name_, category_, start_, std::chrono::steady_clock::now(),
                    {{keys_[0], values_[0]}, {keys_[1], values_[1]}}, nullptr, nullptr));
}

void TimelineSpan::arg(const char* key, int64_t value) {
  for (int i = 0; i < 2; ++i) {
    if (keys_[i] != nullptr) continue;
    keys_[i] = key;
    values_[i] = value;
    return;
  }
}

namespace detail {

void record_span(const char* name, const char* category, TimelineClock::time_point start,
                 TimelineClock::time_point end, TimelineArgs args, const char* text_key,
                 const char* text) {
  if (!dist::timeline_recording()) return;
  append(make_event(name, category, start, end, args, text_key, text));
}

void record_collective(const char* kind, TimelineClock::time_point issued,
                       TimelineClock::time_point completed, TimelineArgs args,
                       const char* algorithm) {
  if (!dist::timeline_recording()) return;
  TimelineEvent event = make_event(kind, "collective", issued, completed, args,
                                   algorithm != nullptr ? "algorithm" : nullptr, algorithm);
  event.collective = true;
  append(event);
}

void name_timeline_thread(const std::string& name) {
  this_thread_name = name;
  if (this_thread_buffer) {
    std::lock_guard<std::mutex> lock(this_thread_buffer->mu);
    this_thread_buffer->name = name;
  }
}

ReplicaStepSpans::ReplicaStepSpans() {
  if (!dist::timeline_recording()) return;
  start_ = TimelineClock::now();
  first_backward_ns = -1;
  last_backward_end_ns = -1;
}

ReplicaStepSpans::~ReplicaStepSpans() {
  if (start_ == TimelineClock::time_point{}) return;
  const auto end = TimelineClock::now();
  if (first_backward_ns < 0) {
    record_span("forward", "compute", start_, end);
    return;
  }
  const auto at = [](int64_t ns) {
    return TimelineClock::time_point(std::chrono::nanoseconds(ns));
  };
  record_span("forward", "compute", start_, at(first_backward_ns));
  record_span("backward", "compute", at(first_backward_ns), at(last_backward_end_ns));
  // apply_gradients and whatever the replica's function does after it (metrics) sit inside.
  record_span("after backward", "step", at(last_backward_end_ns), end);
}

}  // namespace detail
}  // namespace dist
