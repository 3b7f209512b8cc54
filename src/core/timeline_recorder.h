// What the library's layers record into the timeline (dist/core/timeline.h): spans of a
// thread, the collectives of the process, the names of the rows, and a replica's forward and
// backward as autograd ran them. Every call does nothing unless a recording is in progress;
// callers test timeline_recording() first where computing the arguments costs something.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "dist/core/timeline.h"

namespace dist::detail {

using TimelineClock = std::chrono::steady_clock;
using TimelineArgs = std::initializer_list<std::pair<const char*, int64_t>>;

// A span of this thread, from `start` to `end`; up to four integer arguments and one text
// argument (a string literal).
void record_span(const char* name, const char* category, TimelineClock::time_point start,
                 TimelineClock::time_point end, TimelineArgs args = {},
                 const char* text_key = nullptr, const char* text = nullptr);

// A collective between the workers, on the process's "collectives" track: from its issue to
// the moment a thread saw it complete.
void record_collective(const char* kind, TimelineClock::time_point issued,
                       TimelineClock::time_point completed, TimelineArgs args,
                       const char* algorithm);

// This thread's row title ("replica 1"), for this recording and the next ones.
void name_timeline_thread(const std::string& name);

// Around one replica's part of strategy.run on its thread: records "forward" from its start
// until autograd's first backward function on this thread, "backward" until the last one
// ended, and "after backward" from then to the part's end (apply_gradients, and what the
// replica's function does after it); without a backward function the whole part is "forward".
class ReplicaStepSpans {
 public:
  ReplicaStepSpans();
  ReplicaStepSpans(const ReplicaStepSpans&) = delete;
  ReplicaStepSpans& operator=(const ReplicaStepSpans&) = delete;
  ~ReplicaStepSpans();

 private:
  TimelineClock::time_point start_{};  // the epoch: not recording
};

}  // namespace dist::detail
