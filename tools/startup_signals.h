// dist-train's watch over SIGTERM and SIGINT from the first instruction of main until the job's
// own watchers take over (the custom loop's PreemptionWatcher, start_job's StopSignalsEndWaits).
// Without it a signal in the first half second (parsing, the output checks, the timeline's start)
// met the default action and the process died with 143 instead of exiting 4; a chief killed so
// before its store was up left its workers waiting out their rendezvous timeout.
//
// What comes before main cannot be watched: LibTorch's and gRPC's static initialization runs
// before any code of ours (docs/dist-train.md says how long it takes).
#pragma once

namespace dist::tools {

// Installs the early watcher (main's first statement).
void watch_stop_signals_from_start();

// Ends the early watch: throws StopRequested ("stopped by SIGTERM while <during>": exit 4,
// nothing trained) if a signal came since main began, else removes the early watcher. Called
// once a watcher of the job's own is installed (watchers nest, so no signal falls between), or
// where the job has none (the evaluator task: the default action is back). A no-op after the
// first call, and without dist-train's main (the tests' own mains).
void end_early_stop_watch(const char* during);

}  // namespace dist::tools
