// The default StepRunner: each step runs at once on this process's replicas, over its shares
// of the next global batch (every strategy but ParameterServerStrategy).
#pragma once

#include "dist/distribute/distributed_dataset.h"
#include "dist/distribute/step_runner.h"

namespace dist {

class SynchronousStepRunner : public StepRunner {
 public:
  SynchronousStepRunner(DistributedDataset data, TrainStep step);

  bool runs_loop() const override { return true; }
  void serve() override;
  std::unique_ptr<EpochSteps> epoch(
      int64_t epoch, int64_t steps_per_epoch,
      const std::optional<data::IteratorPosition>& resume_at) override;

 private:
  DistributedDataset data_;
  TrainStep step_;
};

}  // namespace dist
