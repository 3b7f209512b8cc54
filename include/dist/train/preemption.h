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
#pragma once

namespace dist {

class PreemptionWatcher {
 public:
  // Installs the handlers (one watcher at a time); the destructor restores the previous ones.
  PreemptionWatcher();
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  bool requested() const;
  // The signal received (SIGTERM or SIGINT), 0 if none.
  int signal_number() const;
};

}  // namespace dist
