#include "dist/train/preemption.h"

#include <signal.h>

#include <atomic>

#include "core/stop_request.h"

namespace dist {
namespace {

// Watchers alive now: the first installs the handlers, the last restores the previous ones. A
// watcher made while another exists (fit's BackupAndRestore inside dist-train's start-up
// watcher) shares the outer one's handlers and keeps a signal that arrived before it.
std::atomic<int> watchers{0};
struct sigaction previous_term, previous_int;

extern "C" void on_stop_signal(int signal_number) {
  if (detail::recorded_stop_signal() != 0) {
    // Second signal: the user insists. Default action from now on, then deliver it.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    return;
  }
  detail::record_stop_signal(signal_number);
}

}  // namespace

PreemptionWatcher::PreemptionWatcher() {
  if (watchers.fetch_add(1) > 0) return;
  detail::record_stop_signal(0);
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls in the step carry on; we stop after it
  ::sigaction(SIGTERM, &action, &previous_term);
  ::sigaction(SIGINT, &action, &previous_int);
  detail::set_stop_watching(true);
}

PreemptionWatcher::~PreemptionWatcher() {
  if (watchers.fetch_sub(1) > 1) return;
  ::sigaction(SIGTERM, &previous_term, nullptr);
  ::sigaction(SIGINT, &previous_int, nullptr);
  detail::set_stop_watching(false);
}

bool PreemptionWatcher::requested() const { return detail::recorded_stop_signal() != 0; }
int PreemptionWatcher::signal_number() const { return detail::recorded_stop_signal(); }

void StopSignalsEndWaits::done() {
  watcher_.reset();
  // Another watcher (the training loop's) may still be installed: the signal is pending there.
  if (const int signal_number = detail::recorded_stop_signal())
    detail::throw_stop_requested(signal_number, during_);
}

}  // namespace dist
