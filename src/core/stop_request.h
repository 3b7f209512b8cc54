// The stop signal a PreemptionWatcher (dist/train/preemption.h) caught, kept in core so that the
// waits of every layer can see it: the rendezvous, the store's clients and an elastic job's
// membership give up a wait within a fraction of a second once a stop is requested, instead of
// sitting out their timeouts (a ps task serving its chief ends the same way).
#pragma once

namespace dist::detail {

// SIGTERM or SIGINT if an installed PreemptionWatcher caught one, else 0.
int pending_stop_signal();

// Throws StopRequested ("stopped by SIGTERM while <during>") when pending_stop_signal() is set.
void throw_if_stop_requested(const char* during);
[[noreturn]] void throw_stop_requested(int signal_number, const char* during);

// For the PreemptionWatcher: whether one is installed, and the signal its handler caught
// (async-signal-safe: one atomic store).
void set_stop_watching(bool watching);
void record_stop_signal(int signal_number);
// The signal caught, whether or not a watcher is installed now; 0 if none.
int recorded_stop_signal();

}  // namespace dist::detail
