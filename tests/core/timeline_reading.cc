#include "core/timeline_reading.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <utility>

namespace dist::testing {

std::vector<TraceSpan> Trace::named(const std::string& name) const {
  std::vector<TraceSpan> out;
  for (const auto& s : spans)
    if (s.name == name) out.push_back(s);
  std::sort(out.begin(), out.end(),
            [](const TraceSpan& a, const TraceSpan& b) { return a.start_us < b.start_us; });
  return out;
}

std::vector<TraceSpan> Trace::named_within(const std::string& name, const TraceSpan& outer) const {
  std::vector<TraceSpan> out;
  for (const auto& s : named(name))
    if (s.within(outer)) out.push_back(s);
  return out;
}

namespace {

TraceSpan span_of(const nlohmann::json& e) {
  TraceSpan s;
  s.name = e.at("name").get<std::string>();
  s.category = e.value("cat", "");
  s.pid = e.at("pid").get<int>();
  s.tid = e.value("tid", 0);
  s.start_us = e.at("ts").get<double>();
  s.duration_us = e.value("dur", 0.0);
  s.args = e.value("args", nlohmann::json::object());
  return s;
}

}  // namespace

Trace read_trace(const std::string& path) {
  Trace trace;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "no timeline at " << path;
  if (!in.good()) return trace;
  nlohmann::json file;
  try {
    file = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << " is not JSON: " << e.what();
    return trace;
  }
  trace.dropped = file.at("otherData").at("dropped_spans").get<int64_t>();
  std::map<std::string, TraceSpan> open;  // async begins by id
  for (const auto& e : file.at("traceEvents")) {
    const std::string phase = e.at("ph").get<std::string>();
    if (phase == "M" && e.at("name") == "process_name") {
      trace.process_name = e.at("args").at("name").get<std::string>();
    } else if (phase == "M" && e.at("name") == "thread_name") {
      trace.thread_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    } else if (phase == "X") {
      trace.spans.push_back(span_of(e));
    } else if (phase == "b") {
      open[e.at("id").get<std::string>()] = span_of(e);
    } else if (phase == "e") {
      auto it = open.find(e.at("id").get<std::string>());
      EXPECT_NE(it, open.end()) << "an async end without its begin in " << path;
      if (it == open.end()) continue;
      it->second.duration_us = e.at("ts").get<double>() - it->second.start_us;
      trace.collectives.push_back(std::move(it->second));
      open.erase(it);
    } else {
      ADD_FAILURE() << "unexpected event phase '" << phase << "' in " << path;
    }
  }
  EXPECT_TRUE(open.empty()) << open.size() << " collectives never ended in " << path;
  return trace;
}

double covered_fraction(const Trace& trace, const TraceSpan& step) {
  std::vector<std::pair<double, double>> parts;
  for (const auto& s : trace.spans) {
    if (&s == &step || s.name == "step") continue;
    const double begin = std::max(s.start_us, step.start_us);
    const double end = std::min(s.end_us(), step.end_us());
    if (end > begin) parts.emplace_back(begin, end);
  }
  std::sort(parts.begin(), parts.end());
  double covered = 0, reached = step.start_us;
  for (const auto& [begin, end] : parts) {
    if (end <= reached) continue;
    covered += end - std::max(begin, reached);
    reached = end;
  }
  return step.duration_us > 0 ? covered / step.duration_us : 1.0;
}

std::string describe_spans(const Trace& trace, const TraceSpan& step) {
  std::vector<const TraceSpan*> overlapping;
  for (const auto& s : trace.spans)
    if (s.start_us < step.end_us() && s.end_us() > step.start_us) overlapping.push_back(&s);
  for (const auto& s : trace.collectives)
    if (s.start_us < step.end_us() && s.end_us() > step.start_us) overlapping.push_back(&s);
  std::sort(overlapping.begin(), overlapping.end(),
            [](const TraceSpan* a, const TraceSpan* b) { return a->start_us < b->start_us; });
  std::string out;
  char line[200];
  for (const TraceSpan* s : overlapping) {
    const auto name = trace.thread_names.find(s->tid);
    std::snprintf(line, sizeof line, "  %-12s %-16s %9.3f ms  %9.3f ms\n",
                  name == trace.thread_names.end() ? "?" : name->second.c_str(), s->name.c_str(),
                  (s->start_us - step.start_us) / 1000, s->duration_us / 1000);
    out += line;
  }
  return out;
}

}  // namespace dist::testing
