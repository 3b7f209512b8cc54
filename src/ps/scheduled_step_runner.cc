#include "ps/scheduled_step_runner.h"

#include <deque>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "ps/parameter_server_extended.h"

namespace dist {
namespace {

constexpr const char* kExamples = "examples";
std::string sum_key(size_t index) { return "sum." + std::to_string(index); }

class ScheduledEpoch : public EpochSteps {
 public:
  ScheduledEpoch(ClusterCoordinator& coordinator, const TrainStep& step,
                 PerWorkerDataset::Iterator iterator, int64_t epoch, int64_t steps, int64_t first)
      : coordinator_(coordinator),
        step_(step),
        iterator_(iterator),
        epoch_(epoch),
        steps_(steps),
        scheduled_(first),
        completed_(first) {}

  std::optional<CompletedSteps> next(const StepGate& gate, bool stopping) override {
    while (!stopping && scheduled_ < steps_ &&
           in_flight_.size() < static_cast<size_t>(ScheduledStepRunner::kStepsInFlight)) {
      const NextStep decision = gate(scheduled_, running());
      if (decision == NextStep::kStop) {
        stopping = true;
        break;
      }
      if (decision == NextStep::kAfterRunningSteps && !in_flight_.empty()) break;
      in_flight_.push_back(coordinator_.schedule(step_.name, iterator_));
      ++scheduled_;
    }
    if (in_flight_.empty()) {
      coordinator_.join();  // every step was fetched; rethrows what a step failed with
      return std::nullopt;
    }
    CompletedSteps done;
    const size_t take = stopping ? in_flight_.size() : 1;
    for (size_t i = 0; i < take; ++i) {
      const auto results = in_flight_.front().fetch_dict();
      in_flight_.pop_front();
      done.examples += add_sums(results);
      done.last = completed_++;
      ++done.count;
    }
    return done;
  }
  int64_t running() const override { return static_cast<int64_t>(in_flight_.size()); }
  data::IteratorPosition position() const override { return {epoch_, completed_}; }
  int64_t steps() const override { return steps_; }
  bool complete() const override { return completed_ >= steps_; }

 private:
  // Adds a finished step's sums to the loop's; returns its examples.
  int64_t add_sums(const std::map<std::string, at::Tensor>& results) {
    std::vector<double> sums;
    for (size_t i = 0;; ++i) {
      const auto it = results.find(sum_key(i));
      if (it == results.end()) break;
      sums.push_back(it->second.item<double>());
    }
    if (step_.sums.add) step_.sums.add(sums);
    const auto examples = results.find(kExamples);
    DIST_CHECK(examples != results.end(), InternalError, "step '", step_.name,
               "' returned no example count");
    return examples->second.item<int64_t>();
  }

  ClusterCoordinator& coordinator_;
  const TrainStep& step_;
  PerWorkerDataset::Iterator iterator_;
  int64_t epoch_, steps_, scheduled_, completed_;
  std::deque<RemoteValue> in_flight_;
};

}  // namespace

ScheduledStepRunner::ScheduledStepRunner(const Strategy& strategy, TrainStep step)
    : step_(std::move(step)),
      chief_(strategy.is_chief()),
      coordinator_(std::make_unique<ClusterCoordinator>(strategy)) {
  DIST_CHECK_ARG(step_.run != nullptr, "TrainStep '", step_.name, "': run is empty");
  coordinator_->register_function(step_.name,
                                  ClusterCoordinator::DictFunction(
                                      [this](ScheduledCall& call) { return run_on_worker(call); }));
  data_ = coordinator_->create_per_worker_dataset([train = step_.data](const InputContext& c) {
    const int64_t batches = train.cardinality();
    const int64_t offset = batches > 0 ? batches * c.input_pipeline_id / c.num_input_pipelines : 0;
    return train.repeat().skip(offset);
  });
}

ScheduledStepRunner::~ScheduledStepRunner() = default;

std::map<std::string, at::Tensor> ScheduledStepRunner::run_on_worker(ScheduledCall& call) {
  const data::Element batch = call.next();
  const int64_t rows = batch.empty() ? 0 : batch[0].size(0);
  // A worker runs one step at a time, so the sums read afterwards are this step's alone.
  if (step_.sums.reset) step_.sums.reset();
  step_.run(PerReplica<data::Element>({batch}, rows));
  std::map<std::string, at::Tensor> results{{kExamples, torch::tensor(rows, torch::kInt64)}};
  if (step_.sums.read) {
    const std::vector<double> sums = step_.sums.read();
    for (size_t i = 0; i < sums.size(); ++i)
      results[sum_key(i)] = torch::tensor(sums[i], torch::kFloat64);
  }
  return results;
}

void ScheduledStepRunner::serve() {
  DIST_CHECK_ARG(!chief_,
                 "StepRunner::serve: the chief runs the training loop; serve() is for "
                 "the ps and worker tasks");
  const int status = coordinator_->serve();
  if (status == 4) return;  // stopped by SIGTERM or SIGINT: the caller's PreemptionWatcher says so
  if (status != 0)
    throw CollectiveError(
        "heard nothing from the chief (the coordinator) within the strategy's "
        "coordinator_timeout; the chief is lost, so this "
        "task stops serving. Run the job again: with checkpoints the chief resumes from its "
        "last one");
}

std::unique_ptr<EpochSteps> ScheduledStepRunner::epoch(
    int64_t epoch, int64_t steps_per_epoch,
    const std::optional<data::IteratorPosition>& resume_at) {
  DIST_CHECK_ARG(chief_,
                 "StepRunner::epoch: only the chief runs the training loop under "
                 "ParameterServerStrategy; the ps and worker tasks call serve()");
  DIST_CHECK_ARG(steps_per_epoch > 0,
                 "under ParameterServerStrategy an epoch is a number of steps (every worker "
                 "repeats its own copy of the data, so the data's end does not end an epoch); "
                 "give the steps per epoch, got ",
                 steps_per_epoch);
  DIST_CHECK_ARG(!resume_at || resume_at->epoch == epoch, "StepRunner::epoch(", epoch,
                 "): the position to resume at belongs to epoch ",
                 resume_at ? resume_at->epoch : 0);
  if (!iterator_) iterator_ = data_.iterator(epoch);
  return std::make_unique<ScheduledEpoch>(*coordinator_, step_, *iterator_, epoch, steps_per_epoch,
                                          resume_at ? resume_at->elements : 0);
}

StepSchedule ParameterServerExtended::step_schedule() const {
  StepSchedule schedule;
  schedule.steps_ahead = ScheduledStepRunner::kStepsInFlight;
  schedule.epoch_is_step_count = true;
  schedule.one_runner_per_job = true;
  schedule.workers_step_apart = true;
  return schedule;
}

std::unique_ptr<StepRunner> ParameterServerExtended::make_step_runner(const Strategy& self,
                                                                      TrainStep step) {
  return std::make_unique<ScheduledStepRunner>(self, std::move(step));
}

}  // namespace dist
