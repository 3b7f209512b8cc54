// The process-wide hook through which metrics sum their state across worker processes.
//
// A multi-worker strategy installs it for its lifetime; without one (a single process) the
// sum is the value itself. Calling it is a collective when installed: every worker must read
// metrics (Metric::result) the same number of times, in the same order. Use
// Metric::local_result for logging on one worker only.
#pragma once

#include <functional>
#include <utility>

namespace dist {

using CrossWorkerSum = std::function<std::pair<double, double>(std::pair<double, double>)>;

// Installs (or, with nullptr, removes) the hook.
void set_cross_worker_sum(CrossWorkerSum sum);

// (total, count) summed over all workers.
std::pair<double, double> cross_worker_sum(std::pair<double, double> local);

}  // namespace dist
