#include "core/stop_request.h"

#include <atomic>
#include <csignal>

#include "dist/core/error.h"

namespace dist::detail {
namespace {

std::atomic<int> received{0};
std::atomic<bool> watching{false};

const char* signal_name(int signal_number) {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace

int pending_stop_signal() { return watching.load() ? received.load() : 0; }

void throw_if_stop_requested(const char* during) {
  if (const int signal_number = pending_stop_signal()) throw_stop_requested(signal_number, during);
}

void throw_stop_requested(int signal_number, const char* during) {
  throw StopRequested(concat("stopped by ", signal_name(signal_number), " while ", during));
}

void set_stop_watching(bool now) { watching.store(now); }
void record_stop_signal(int signal_number) { received.store(signal_number); }
int recorded_stop_signal() { return received.load(); }

}  // namespace dist::detail
