// The timeline's recorded events, as the recorder (timeline.cc) keeps them and the writer
// (timeline_writer.cc) turns them into the Chrome trace event format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dist::detail {

struct TimelineEvent {
  const char* name = nullptr;      // string literals: they outlive the recording
  const char* category = nullptr;  //
  bool collective = false;         // on the process's collectives track, as an async span
  int64_t start_ns = 0;            // steady clock
  int64_t duration_ns = 0;
  const char* keys[4] = {nullptr, nullptr, nullptr, nullptr};
  int64_t values[4] = {0, 0, 0, 0};
  const char* text_key = nullptr;
  const char* text = nullptr;
};

// One thread's events, in the order they ended.
struct TimelineThread {
  int id = 0;
  std::string name;
  std::vector<TimelineEvent> events;
};

struct TimelineRecording {
  std::string process_name;
  int process_id = 0;
  // The system clock's microseconds at the steady clock's `steady_anchor_ns`: every timestamp
  // is written on the system clock, so that the files of several workers line up.
  int64_t system_anchor_us = 0;
  int64_t steady_anchor_ns = 0;
  int64_t dropped = 0;
  std::vector<TimelineThread> threads;
};

// Writes `recording` to `path` (through a temporary file and a rename); returns its span count.
int64_t write_timeline(const std::string& path, const TimelineRecording& recording);

}  // namespace dist::detail
