#include "distribute/strategies/synchronous_step_runner.h"

#include "core/timeline_recorder.h"
#include "dist/core/error.h"
#include "dist/distribute/strategy.h"

namespace dist {
namespace {

class SynchronousEpoch : public EpochSteps {
 public:
  SynchronousEpoch(const DistributedDataset& data, const TrainStep& step, int64_t epoch,
                   int64_t steps_per_epoch, const std::optional<data::IteratorPosition>& resume_at)
      : step_(step),
        iterator_(resume_at ? data.iterator_at(*resume_at) : data.iterator(epoch)),
        position_(iterator_.position()),
        index_(resume_at ? resume_at->elements : 0),
        steps_(steps_per_epoch >= 0 ? steps_per_epoch : data.cardinality()),
        cardinality_(data.cardinality()),
        limit_(steps_per_epoch) {}

  std::optional<CompletedSteps> next(const StepGate& gate, bool stopping) override {
    if (stopping || at_limit()) return std::nullopt;
    // A timeline's "step": from asking for the batch until the step ran (none for the call
    // that finds the data exhausted or is stopped by the gate).
    const bool recording = timeline_recording();
    const auto started =
        recording ? detail::TimelineClock::now() : detail::TimelineClock::time_point{};
    if (recording) detail::name_timeline_thread("loop");
    // The batch first: the gate (a callback's on_train_batch_begin) hears only of steps that
    // exist. A batch the gate refuses is dropped; position() stays before it.
    std::optional<PerReplica<data::Element>> batch;
    {
      TimelineSpan waiting("data", "data");
      batch = iterator_.next();
    }
    if (!batch) {
      exhausted_ = true;
      return std::nullopt;
    }
    if (gate(index_, 0) == NextStep::kStop) return std::nullopt;
    step_.run(*batch);
    position_ = iterator_.position();
    if (recording)
      detail::record_span("step", "step", started, detail::TimelineClock::now(),
                          {{"epoch", position_.epoch}, {"step", index_}});
    return CompletedSteps{1, index_++, batch->global_batch_size()};
  }
  int64_t running() const override { return 0; }
  data::IteratorPosition position() const override { return position_; }
  int64_t steps() const override { return steps_; }
  bool complete() const override {
    return exhausted_ || at_limit() || (cardinality_ >= 0 && index_ >= cardinality_);
  }

 private:
  bool at_limit() const { return limit_ >= 0 && index_ >= limit_; }

  const TrainStep& step_;
  DistributedIterator iterator_;
  data::IteratorPosition position_;
  int64_t index_;
  int64_t steps_;
  int64_t cardinality_;
  int64_t limit_;
  bool exhausted_ = false;
};

}  // namespace

SynchronousStepRunner::SynchronousStepRunner(DistributedDataset data, TrainStep step)
    : data_(std::move(data)), step_(std::move(step)) {
  DIST_CHECK_ARG(step_.run != nullptr, "TrainStep '", step_.name, "': run is empty");
}

void SynchronousStepRunner::serve() {
  throw InvalidArgument(
      "StepRunner::serve: every process of a synchronous strategy runs the "
      "training loop; call serve() only where runs_loop() is false");
}

std::unique_ptr<EpochSteps> SynchronousStepRunner::epoch(
    int64_t epoch, int64_t steps_per_epoch,
    const std::optional<data::IteratorPosition>& resume_at) {
  DIST_CHECK_ARG(!resume_at || resume_at->epoch == epoch, "StepRunner::epoch(", epoch,
                 "): the position to resume at belongs to epoch ",
                 resume_at ? resume_at->epoch : 0);
  return std::make_unique<SynchronousEpoch>(data_, step_, epoch, steps_per_epoch, resume_at);
}

std::unique_ptr<StepRunner> StrategyExtended::make_step_runner(const Strategy& self,
                                                               TrainStep step) {
  DIST_INTERNAL_ASSERT(&self.extended() == this);
  auto data = self.experimental_distribute_dataset(step.data);
  return std::make_unique<SynchronousStepRunner>(std::move(data), std::move(step));
}

}  // namespace dist
