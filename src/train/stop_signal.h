// The library's view of a stop signal caught by the PreemptionWatcher (dist/train/preemption.h),
// for code that waits outside a training loop: a ps or worker task serving its chief
// (ClusterCoordinator::serve) must end on SIGTERM rather than wait out its timeout, and has no
// watcher object to ask.
#pragma once

namespace dist::detail {

// SIGTERM or SIGINT if an installed PreemptionWatcher caught one, else 0.
int pending_stop_signal();

}  // namespace dist::detail
