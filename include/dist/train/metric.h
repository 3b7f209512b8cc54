// Metric: a streaming statistic with one state per replica, aggregated when read, as tf.keras
// metrics under a strategy. Each replica thread updates only its own (total, count) slot
// (slot 0 outside strategy.run()); result() is finalize(sum of totals, sum of counts), which
// weighs every example equally however the batches were split (the mean of per-replica means
// of {1} and {3, 3, 3} would be 2.5, not 2). A metric updated inside strategy.run() belongs to
// that strategy, and result() also sums over its workers (StrategyExtended::
// sum_across_workers); one only updated in cross-replica code reads this process's state.
// Totals and counts are doubles. Every method may be called concurrently.
// The concrete metrics are in dist/train/metrics.h.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dist/distribute/step_runner.h"

namespace dist {

class StrategyExtended;

class Metric {
 public:
  explicit Metric(std::string name);
  virtual ~Metric();
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  const std::string& name() const { return name_; }

  // finalize() of the totals and counts summed over all replica slots and, for a metric
  // updated under a multi-worker strategy, over all workers: then a collective that every
  // worker must call at the same point.
  double result() const;
  // The same over this process's replicas only; never communicates (for progress display).
  double local_result() const;

  // Zeroes every slot (at the start of an epoch, as Keras does).
  void reset_state();

  // The summed (total, count) behind result(), for checkpoints; a collective like result().
  std::pair<double, double> total_and_count() const;
  // Replaces the state with (total, count) in one slot (restoring a checkpoint: under a
  // multi-worker strategy restore on one worker only, and zero elsewhere).
  void restore_state(double total, double count);

  // The (total, count) of each replica slot, index = replica id; at least one slot. For tests,
  // and for checkpoints, which should store the sums so as to restore under any replica count.
  std::vector<std::pair<double, double>> local_states() const;

 protected:
  // Adds to the calling replica's slot.
  void accumulate(double total, double count);

  // The value of the metric for these summed totals and counts. The default is the mean,
  // total / count, and 0 when count is 0 (nothing seen yet, or all weights zero).
  virtual double finalize(double total, double count) const;

 private:
  std::pair<double, double> local_sums() const;
  std::pair<double, double> global_sums() const;

  std::string name_;
  mutable std::mutex mutex_;
  std::vector<std::pair<double, double>> slots_;  // guarded by mutex_; grows to max replica id
  // The strategy whose run() updated this metric (guarded by mutex_).
  std::weak_ptr<const StrategyExtended> strategy_;
};

// The metrics' totals and counts as a step's sums (step_runner.h): where a strategy runs the
// steps on other processes, each step's metric updates travel back and are added to these.
// The metrics must outlive the runner.
StepSums metric_step_sums(std::vector<Metric*> metrics);

}  // namespace dist
