// The duties every strategy states (StrategyExtended): workers, chief, cross-worker
// agreement; metrics and models belong to the strategy that runs them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/train/metrics.h"

namespace dist {
namespace {

TEST(StrategyContractTest, InProcessStrategiesAreOneChiefWorker) {
  for (const Strategy& strategy :
       {Strategy(OneDeviceStrategy()),
        Strategy(MirroredStrategy(std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"})),
        get_default_strategy()}) {
    EXPECT_EQ(strategy.num_workers(), 1) << strategy.name();
    EXPECT_EQ(strategy.worker_index(), 0);
    EXPECT_TRUE(strategy.is_chief());
    EXPECT_EQ(strategy.extended().first_replica_id(), 0);
    EXPECT_TRUE(strategy.any_worker(true));
    EXPECT_FALSE(strategy.any_worker(false));
    EXPECT_EQ(strategy.extended().agree_step(true, 17), std::make_pair(true, int64_t{17}));
    EXPECT_EQ(strategy.extended().sum_across_workers({1.5, 2.0}), (std::vector<double>{1.5, 2.0}));
  }
}

TEST(StrategyContractTest, AMetricBelongsToTheStrategyThatUpdatedIt) {
  MirroredStrategy two(std::vector<std::string>{"cpu:0", "cpu:1"});
  MirroredStrategy three(std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"});
  metrics::Mean mean("loss");
  two.run([&] { mean.update_state(torch::ones({2})); });
  EXPECT_DOUBLE_EQ(mean.result(), 1.0);
  try {
    three.run([&] { mean.update_state(torch::ones({2})); });
    FAIL() << "a metric moved between strategies";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("metric 'loss' is updated under strategy 'mirrored' (3 replicas in "
                           "sync, object "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("but was first updated under another strategy object, strategy "
                           "'mirrored' (2 replicas in sync, object "),
              std::string::npos)
        << message;
  }
}

TEST(StrategyContractTest, AModelRunsOnlyUnderTheStrategyThatPlacedIt) {
  MirroredStrategy two(std::vector<std::string>{"cpu:0", "cpu:1"});
  OneDeviceStrategy one;
  auto model = one.mirror(torch::nn::Sequential(torch::nn::Linear(2, 1)));
  try {
    two.run([&] { model->forward(torch::ones({1, 2})); });
    FAIL() << "a one_device model ran inside a mirrored step";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("made by strategy 'one_device'"), std::string::npos)
        << e.what();
  }
  // Outside run() the primary module answers.
  EXPECT_EQ(model->forward(torch::ones({1, 2})).sizes(), (std::vector<int64_t>{1, 1}));
}

TEST(StrategyContractTest, OptimizerIsBuiltOverTheVariablesTheStrategyNames) {
  MirroredStrategy two(std::vector<std::string>{"cpu:0", "cpu:1"});
  auto model = two.mirror(torch::nn::Sequential(torch::nn::Linear(2, 3)));
  auto optimizer = two.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  const auto trainable = model.variables().trainable_variables();
  const auto& owned = optimizer->optimizer().param_groups().at(0).params();
  ASSERT_EQ(owned.size(), trainable.size());
  for (size_t i = 0; i < owned.size(); ++i) EXPECT_TRUE(owned[i].is_same(trainable[i]));
}

}  // namespace
}  // namespace dist
