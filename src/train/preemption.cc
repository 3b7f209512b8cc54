#include "dist/train/preemption.h"

#include <signal.h>

#include <atomic>

#include "dist/core/error.h"
#include "train/stop_signal.h"

namespace dist {
namespace {

std::atomic<int> received{0};
std::atomic<bool> installed{false};
struct sigaction previous_term, previous_int;

extern "C" void on_stop_signal(int signal_number) {
  if (received.load() != 0) {
    // Second signal: the user insists. Default action from now on, then deliver it.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    return;
  }
  received.store(signal_number);
}

}  // namespace

PreemptionWatcher::PreemptionWatcher() {
  DIST_CHECK_ARG(!installed.exchange(true), "only one PreemptionWatcher may exist at a time");
  received.store(0);
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls in the step carry on; we stop after it
  ::sigaction(SIGTERM, &action, &previous_term);
  ::sigaction(SIGINT, &action, &previous_int);
}

PreemptionWatcher::~PreemptionWatcher() {
  ::sigaction(SIGTERM, &previous_term, nullptr);
  ::sigaction(SIGINT, &previous_int, nullptr);
  installed.store(false);
}

bool PreemptionWatcher::requested() const { return received.load() != 0; }
int PreemptionWatcher::signal_number() const { return received.load(); }

int detail::pending_stop_signal() { return installed.load() ? received.load() : 0; }

}  // namespace dist
