// ParameterServerStrategy's StepRunner: the chief schedules each step on an idle worker through
// a ClusterCoordinator, up to kStepsInFlight ahead of the oldest unfinished one, and adds each
// finished step's sums (StepSums) to its own; ps and worker tasks serve. Worker i of N trains
// on its own copy of the data, started i/N of the way into the first pass and repeated without
// end: the copies are shuffled alike, so copies all started at the beginning would give every
// worker the same batches, and a fast worker never runs dry.
#pragma once

#include <memory>
#include <optional>

#include "dist/distribute/cluster_coordinator.h"
#include "dist/distribute/step_runner.h"

namespace dist {

class ScheduledStepRunner : public StepRunner {
 public:
  // Steps scheduled ahead of the oldest unfinished one: enough to keep several workers busy
  // while the chief waits for the oldest, few enough that a stop or a checkpoint waits for
  // little.
  static constexpr int64_t kStepsInFlight = 16;

  // Registers the step on this task (every task makes the same runners in the same order).
  ScheduledStepRunner(const Strategy& strategy, TrainStep step);
  ~ScheduledStepRunner() override;

  bool runs_loop() const override { return chief_; }
  void serve() override;
  std::unique_ptr<EpochSteps> epoch(
      int64_t epoch, int64_t steps_per_epoch,
      const std::optional<data::IteratorPosition>& resume_at) override;

 private:
  // On a worker: one step on the worker's next batch; its sums as named tensors.
  std::map<std::string, at::Tensor> run_on_worker(ScheduledCall& call);

  TrainStep step_;
  bool chief_;
  // After step_: destroyed first, so no call of a step outlives it.
  std::unique_ptr<ClusterCoordinator> coordinator_;
  PerWorkerDataset data_;
  // One iterator per worker for the whole loop, made at the first epoch (positions on the
  // workers are not saved, so a resumed loop starts the pass of the epoch it resumes at).
  std::optional<PerWorkerDataset::Iterator> iterator_;
};

}  // namespace dist
