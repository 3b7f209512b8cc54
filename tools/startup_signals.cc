#include "startup_signals.h"

#include <csignal>
#include <optional>

#include "dist/core/error.h"
#include "dist/train/preemption.h"

namespace dist::tools {
namespace {

std::optional<PreemptionWatcher>& early_watcher() {
  static std::optional<PreemptionWatcher> watcher;
  return watcher;
}

}  // namespace

void watch_stop_signals_from_start() { early_watcher().emplace(); }

void end_early_stop_watch(const char* during) {
  auto& watcher = early_watcher();
  if (!watcher) return;
  const int signal_number = watcher->signal_number();
  watcher.reset();
  DIST_CHECK(signal_number == 0, StopRequested, "stopped by ",
             signal_number == SIGINT ? "SIGINT" : "SIGTERM", " while ", during);
}

}  // namespace dist::tools
