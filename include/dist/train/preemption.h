// PreemptionWatcher: turns SIGTERM and SIGINT into a request to stop at the next step boundary,
// so a training loop can finish the step, save a checkpoint and exit (a preempted VM or a
// job scheduler sends SIGTERM first; Ctrl-C sends SIGINT).
//
//   dist::PreemptionWatcher watcher;
//   for (...) { step(); if (strategy.any_worker(watcher.requested())) { save(); return; } }
//
// Under MultiWorkerMirroredStrategy only the signalled worker sees requested(); any_worker()
// makes every worker stop at the same step. A second signal while the first is pending
// restores the default action, so a stuck job can still be killed with a second Ctrl-C.
//
// While one is installed, the library's waits for other processes (the rendezvous of a
// multi-worker job, an elastic job's joining and regrouping) end within about a second of the
// signal by throwing StopRequested (dist/core/error.h), instead of waiting out their timeouts.
// Watchers nest: one made while another exists shares its handlers and sees a signal the
// outer one caught.
#pragma once

#include <optional>

namespace dist {

class PreemptionWatcher {
 public:
  // Installs the handlers (unless another watcher has); the last watcher's destructor restores
  // the previous ones.
  PreemptionWatcher();
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  bool requested() const;
  // The signal received (SIGTERM or SIGINT), 0 if none.
  int signal_number() const;
};

// Makes SIGTERM and SIGINT end the library's waits for other processes (a rendezvous, the
// start-up checks, an elastic job's joining and regrouping) with StopRequested within about a
// second, for the span between its making and done(), installing a PreemptionWatcher for that
// span where none is (an outer one is shared). done() removes it and then throws StopRequested
// ("stopped by SIGTERM while <during>") if a signal came meanwhile, after the last wait looked:
// a signal is never lost between the two.
class StopSignalsEndWaits {
 public:
  explicit StopSignalsEndWaits(const char* during = "starting the job")
      : during_(during), watcher_(std::in_place) {}
  void done();

 private:
  const char* during_;
  std::optional<PreemptionWatcher> watcher_;
};

}  // namespace dist
