// The Chrome trace event format (the "JSON Object Format" of the Trace Event Format document):
// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}. A thread's span is a
// complete event ("ph": "X", "ts" and "dur" in microseconds); a collective is an async pair
// ("b" and "e" with one "id") so that collectives in flight at once may overlap; metadata
// events ("M") name the process and its threads.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "core/atomic_file.h"
#include "core/timeline_events.h"
#include "dist/core/env.h"

namespace dist::detail {
namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", c);
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

class TraceText {
 public:
  explicit TraceText(const TimelineRecording& recording) : recording_(recording) {}

  // A timestamp in microseconds of the system clock, to the nanosecond.
  std::string timestamp(int64_t steady_ns) const {
    const int64_t since_anchor = steady_ns - recording_.steady_anchor_ns;
    const int64_t ns = recording_.system_anchor_us * 1000 + since_anchor;
    return microseconds(ns);
  }
  static std::string microseconds(int64_t ns) {
    char text[48];
    std::snprintf(text, sizeof text, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
    return text;
  }

  void metadata(const char* what, int thread, const std::string& name) {
    begin_event();
    out_ += "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + pid();
    if (thread >= 0) out_ += ",\"tid\":" + std::to_string(thread);
    out_ += ",\"args\":{\"name\":\"" + escaped(name) + "\"}}";
  }

  void span(int thread, const TimelineEvent& e) {
    begin_event();
    out_ += "{\"ph\":\"X\"," + common(e) + ",\"tid\":" + std::to_string(thread) +
            ",\"ts\":" + timestamp(e.start_ns) + ",\"dur\":" + microseconds(e.duration_ns) +
            ",\"args\":" + args(e) + "}";
  }

  // An async pair on the collectives track; `id` is unique in the process.
  void collective(int64_t id, const TimelineEvent& e) {
    // The id names the process too: a merged file's collectives stay apart.
    const std::string shared =
        common(e) + ",\"tid\":0,\"id\":\"" + pid() + "." + std::to_string(id) + "\"";
    begin_event();
    out_ += "{\"ph\":\"b\"," + shared + ",\"ts\":" + timestamp(e.start_ns) +
            ",\"args\":" + args(e) + "}";
    begin_event();
    out_ += "{\"ph\":\"e\"," + shared + ",\"ts\":" + timestamp(e.start_ns + e.duration_ns) + "}";
  }

  std::string finish() {
    return "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"recorded_by\":\"distribute\","
           "\"dropped_spans\":" +
           std::to_string(recording_.dropped) + "},\"traceEvents\":[\n" + out_ + "\n]}\n";
  }

 private:
  std::string pid() const { return std::to_string(recording_.process_id); }
  void begin_event() {
    if (!out_.empty()) out_ += ",\n";
  }
  std::string common(const TimelineEvent& e) const {
    return "\"name\":\"" + escaped(e.name) + "\",\"cat\":\"" + escaped(e.category) +
           "\",\"pid\":" + pid();
  }
  static std::string args(const TimelineEvent& e) {
    std::string out = "{";
    for (int i = 0; i < 4; ++i) {
      if (e.keys[i] == nullptr) continue;
      if (out.size() > 1) out += ",";
      out += "\"" + escaped(e.keys[i]) + "\":" + std::to_string(e.values[i]);
    }
    if (e.text_key != nullptr && e.text != nullptr) {
      if (out.size() > 1) out += ",";
      out += "\"" + escaped(e.text_key) + "\":\"" + escaped(e.text) + "\"";
    }
    return out + "}";
  }

  const TimelineRecording& recording_;
  std::string out_;
};

}  // namespace

int64_t write_timeline(const std::string& path, const TimelineRecording& recording) {
  TraceText text(recording);
  text.metadata("process_name", -1, recording.process_name);
  text.metadata("thread_name", 0, "collectives");
  int64_t spans = 0, next_id = 1;
  for (const auto& thread : recording.threads) {
    // Row 0 is the collectives track; threads follow from 1.
    const int row = thread.id + 1;
    text.metadata("thread_name", row,
                  thread.name.empty() ? "thread " + std::to_string(thread.id) : thread.name);
    for (const auto& event : thread.events) {
      if (event.collective)
        text.collective(next_id++, event);
      else
        text.span(row, event);
      ++spans;
    }
  }
  const std::string bytes = text.finish();
  write_file_atomically(Env::Default(), path, "the timeline file",
                        [&](WritableFile& file) { file.append(bytes.data(), bytes.size()); });
  return spans;
}

}  // namespace dist::detail
