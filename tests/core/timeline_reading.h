// Reads a timeline file (dist/core/timeline.h) back for the tests: its spans, its collectives,
// and how much of a step its other spans account for.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dist::testing {

struct TraceSpan {
  std::string name;
  std::string category;
  int pid = 0;
  int tid = 0;
  double start_us = 0;  // the system clock's microseconds
  double duration_us = 0;
  nlohmann::json args;
  double end_us() const { return start_us + duration_us; }
  bool within(const TraceSpan& outer) const {
    return start_us >= outer.start_us && end_us() <= outer.end_us();
  }
};

struct Trace {
  std::string process_name;
  std::map<int, std::string> thread_names;  // tid -> name
  std::vector<TraceSpan> spans;             // complete events ("X"), in file order
  std::vector<TraceSpan> collectives;       // async pairs ("b", "e") joined into spans
  int64_t dropped = 0;

  // The spans named `name`, in start order.
  std::vector<TraceSpan> named(const std::string& name) const;
  // The spans named `name` inside `outer` (any thread).
  std::vector<TraceSpan> named_within(const std::string& name, const TraceSpan& outer) const;
};

// Parses `path` (gtest failures and an empty Trace if it is not a well-formed timeline).
Trace read_trace(const std::string& path);

// The fraction of `step`'s wall time that the union of the other threads' spans and of the
// step's own thread's spans other than itself cover (collectives left out: a thread waiting on
// one has a "wait" span).
double covered_fraction(const Trace& trace, const TraceSpan& step);

// The spans that overlap `step`, a line each (row, name, start and length in ms from the
// step's start), for a failure's message.
std::string describe_spans(const Trace& trace, const TraceSpan& step);

}  // namespace dist::testing
