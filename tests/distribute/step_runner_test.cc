// StepRunner (step_runner.h) under the synchronous strategies: which steps run, in which order,
// what a gate's answer does, where a resumed epoch starts, and how metric sums travel.
// ParameterServerStrategy's runner is exercised with real processes by tests/keras/ps_fit_test
// and tests/tools/dist_train_ps_test.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/train/metrics.h"

namespace dist {
namespace {

using data::Element;

// 10 examples whose feature is their index, in global batches of 4: {0..3}, {4..7}, {8, 9}.
data::Dataset ten_in_batches_of_four() {
  return data::Dataset::from_tensor_slices({torch::arange(10, torch::kFloat32).unsqueeze(1)})
      .batch(4);
}

// A runner whose step records, per step, the first example of each replica's share and the
// step's global batch size.
struct Recorder {
  std::vector<std::vector<float>> firsts;
  std::vector<int64_t> global_batches;
  std::unique_ptr<StepRunner> runner(const Strategy& strategy) {
    return strategy.make_step_runner(
        TrainStep("test/record", ten_in_batches_of_four(), [this](const PerReplica<Element>& b) {
          std::vector<float> first;
          for (const Element& share : b.values())
            first.push_back(share[0].numel() == 0 ? -1.0f : share[0][0][0].item<float>());
          firsts.push_back(first);
          global_batches.push_back(b.global_batch_size());
        }));
  }
};

const StepGate kAlwaysStart = [](int64_t, int64_t) { return NextStep::kStart; };

TEST(StepRunnerTest, RunsEveryGlobalBatchOnceInOrderAndCountsItsExamples) {
  Recorder recorder;
  MirroredStrategy strategy(std::vector<std::string>{"cpu:0", "cpu:1"});
  auto runner = recorder.runner(strategy);
  EXPECT_TRUE(runner->runs_loop());
  auto steps = runner->epoch(0, -1);
  EXPECT_EQ(steps->steps(), 3);
  std::vector<int64_t> indices, examples;
  while (auto done = steps->next(kAlwaysStart)) {
    EXPECT_EQ(done->count, 1);
    EXPECT_EQ(steps->running(), 0);
    indices.push_back(done->last);
    examples.push_back(done->examples);
    EXPECT_EQ(steps->position().elements, done->last + 1);
  }
  EXPECT_TRUE(steps->complete());
  EXPECT_EQ(indices, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(examples, (std::vector<int64_t>{4, 4, 2}));
  // Each replica takes its half of the global batch; the last, partial one is split 1 + 1.
  EXPECT_EQ(recorder.firsts, (std::vector<std::vector<float>>{{0, 2}, {4, 6}, {8, 9}}));
  EXPECT_EQ(recorder.global_batches, (std::vector<int64_t>{4, 4, 2}));
}

TEST(StepRunnerTest, StepsPerEpochCapsTheEpoch) {
  Recorder recorder;
  auto runner = recorder.runner(OneDeviceStrategy());
  auto steps = runner->epoch(0, 2);
  EXPECT_EQ(steps->steps(), 2);
  int taken = 0;
  while (steps->next(kAlwaysStart)) ++taken;
  EXPECT_EQ(taken, 2);
  EXPECT_TRUE(steps->complete());
}

TEST(StepRunnerTest, AStopFromTheGateRunsNoStepAndKeepsThePositionBeforeIt) {
  Recorder recorder;
  auto runner = recorder.runner(OneDeviceStrategy());
  auto steps = runner->epoch(0, -1);
  std::vector<int64_t> asked;
  const StepGate stop_at_second = [&](int64_t step, int64_t running) {
    asked.push_back(step);
    EXPECT_EQ(running, 0);
    return step == 1 ? NextStep::kStop : NextStep::kStart;
  };
  ASSERT_TRUE(steps->next(stop_at_second));
  EXPECT_FALSE(steps->next(stop_at_second));
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(recorder.firsts.size(), 1u);
  EXPECT_EQ(steps->position().elements, 1);  // a resume runs batch 1 again
  EXPECT_FALSE(steps->complete());
  // A loop that is stopping starts nothing and asks nobody.
  EXPECT_FALSE(steps->next(stop_at_second, /*stopping=*/true));
  EXPECT_EQ(asked.size(), 2u);
}

TEST(StepRunnerTest, AResumedEpochStartsAtTheSavedStep) {
  Recorder recorder;
  auto runner = recorder.runner(OneDeviceStrategy());
  auto steps = runner->epoch(0, -1, data::IteratorPosition{0, 2});
  auto done = steps->next(kAlwaysStart);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->last, 2);
  EXPECT_EQ(recorder.firsts, (std::vector<std::vector<float>>{{8}}));
  EXPECT_FALSE(steps->next(kAlwaysStart));
  EXPECT_TRUE(steps->complete());
  // A position of another epoch is refused by name.
  try {
    runner->epoch(1, -1, data::IteratorPosition{0, 2});
    FAIL() << "a position of epoch 0 resumed epoch 1";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to epoch 0"), std::string::npos) << e.what();
  }
}

TEST(StepRunnerTest, SynchronousStrategiesRunEveryStepAtOnceOnEveryProcess) {
  for (const Strategy& strategy : {Strategy(OneDeviceStrategy()),
                                   Strategy(MirroredStrategy(std::vector<std::string>{"cpu:0"}))}) {
    const StepSchedule schedule = strategy.step_schedule();
    EXPECT_EQ(schedule.steps_ahead, 1);
    EXPECT_FALSE(schedule.epoch_is_step_count);
    EXPECT_FALSE(schedule.one_runner_per_job);
    Recorder recorder;
    auto runner = recorder.runner(strategy);
    try {
      runner->serve();
      FAIL() << "serve() under " << strategy.name();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("runs the training loop"), std::string::npos);
    }
  }
}

TEST(StepRunnerTest, MetricSumsAreReadResetAndAddedExactly) {
  metrics::Mean worker_loss("loss"), chief_loss("loss");
  metrics::SparseCategoricalAccuracy worker_accuracy("accuracy"), chief_accuracy("accuracy");
  const StepSums worker = metric_step_sums({&worker_loss, &worker_accuracy});
  const StepSums chief = metric_step_sums({&chief_loss, &chief_accuracy});
  chief_loss.update_state(torch::tensor(0.5));
  for (int step = 0; step < 2; ++step) {
    worker.reset();
    worker_loss.update_state(torch::tensor(0.25 * (step + 1)));
    worker_accuracy.update_state(torch::tensor({0, 1, 0}, torch::kInt64), torch::eye(3));
    const std::vector<double> sums = worker.read();
    EXPECT_EQ(sums, (std::vector<double>{0.25 * (step + 1), 1, 2, 3}));
    chief.add(sums);
  }
  EXPECT_EQ(chief_loss.total_and_count(), std::make_pair(0.5 + 0.25 + 0.5, 3.0));
  EXPECT_EQ(chief_accuracy.total_and_count(), std::make_pair(4.0, 6.0));
  EXPECT_THROW(chief.add({1.0}), InternalError);
}

}  // namespace
}  // namespace dist
