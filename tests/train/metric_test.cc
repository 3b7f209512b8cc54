#include "dist/train/metric.h"

#include <exception>
#include <functional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "collective/local/local_communicator.h"
#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"
#include "dist/train/metrics.h"
#include "replica_threads.h"
#include "tensor_literals.h"

namespace dist {
namespace {

using State = std::pair<double, double>;

using testing::doubles;
using testing::longs;
using testing::run_replicas;

TEST(MetricTest, MeanOfValues) {
  metrics::Mean mean;
  EXPECT_EQ(mean.name(), "mean");
  EXPECT_EQ(mean.result(), 0.0);  // nothing seen yet
  mean.update_state(doubles({1, 2, 3}));
  EXPECT_DOUBLE_EQ(mean.result(), 2);
  mean.update_state(doubles({10}).reshape({1, 1}));
  EXPECT_DOUBLE_EQ(mean.result(), 4);
  EXPECT_EQ(mean.local_states(), (std::vector<State>{{16, 4}}));
}

TEST(MetricTest, MeanWithSampleWeight) {
  metrics::Mean mean("loss");
  EXPECT_EQ(mean.name(), "loss");
  mean.update_state(doubles({1, 2, 3}), doubles({1, 0, 1}));
  EXPECT_DOUBLE_EQ(mean.result(), 2);
  mean.update_state(doubles({6}), doubles({2}));
  EXPECT_DOUBLE_EQ(mean.result(), 4);  // (1 + 3 + 12) / 4
  mean.update_state(doubles({5, 5}), torch::tensor(0.0));
  EXPECT_DOUBLE_EQ(mean.result(), 4);
  EXPECT_THROW(mean.update_state(doubles({1, 2}), doubles({1, 2, 3})), InvalidArgument);
}

TEST(MetricTest, MeanOfAllZeroWeightsIsZero) {
  metrics::Mean mean;
  mean.update_state(doubles({7}), doubles({0}));
  EXPECT_EQ(mean.result(), 0.0);
}

TEST(MetricTest, MeanIgnoresAutograd) {
  metrics::Mean mean;
  auto values = doubles({1, 3}).requires_grad_(true);
  mean.update_state(values * 2);
  EXPECT_DOUBLE_EQ(mean.result(), 4);
}

TEST(MetricTest, MeanAccumulatesLowPrecisionInputsInDouble) {
  metrics::Mean mean;
  // 2^24 + 1 is not a float; summing in float would lose the 1s.
  for (int i = 0; i < 4; ++i) mean.update_state(torch::full({1}, 16777216.0f));
  for (int i = 0; i < 4; ++i) mean.update_state(torch::ones({1}));
  EXPECT_DOUBLE_EQ(mean.local_states()[0].first, 4 * 16777216.0 + 4);
}

TEST(MetricTest, SumOfValues) {
  metrics::Sum sum;
  EXPECT_EQ(sum.name(), "sum");
  sum.update_state(doubles({1, 2, 3}));
  sum.update_state(doubles({4}), doubles({0.5}));
  EXPECT_DOUBLE_EQ(sum.result(), 8);
}

TEST(MetricTest, SparseCategoricalAccuracy) {
  metrics::SparseCategoricalAccuracy accuracy;
  EXPECT_EQ(accuracy.name(), "sparse_categorical_accuracy");
  auto y_pred = doubles({0.1, 0.9, 0.8, 0.2, 0.3, 0.7}).reshape({3, 2});
  accuracy.update_state(longs({1, 1, 1}), y_pred);
  EXPECT_DOUBLE_EQ(accuracy.result(), 2.0 / 3);
  accuracy.update_state(longs({0}).reshape({1, 1}), doubles({5, -5}).reshape({1, 2}));
  EXPECT_DOUBLE_EQ(accuracy.result(), 3.0 / 4);
  accuracy.reset_state();
  accuracy.update_state(longs({1, 1, 1}), y_pred, doubles({0, 3, 1}));
  EXPECT_DOUBLE_EQ(accuracy.result(), 1.0 / 4);
}

TEST(MetricTest, SparseCategoricalAccuracyEmptyBatchAddsNothing) {
  metrics::SparseCategoricalAccuracy accuracy;
  accuracy.update_state(torch::zeros({0}, torch::kLong), torch::zeros({0, 10}));
  EXPECT_EQ(accuracy.result(), 0.0);
  EXPECT_EQ(accuracy.local_states(), (std::vector<State>{{0, 0}}));
}

TEST(MetricTest, SparseCategoricalAccuracyShapeMismatchNamesBothShapes) {
  metrics::SparseCategoricalAccuracy accuracy;
  try {
    accuracy.update_state(longs({1, 0}), torch::zeros({3, 2}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("[2]"), std::string::npos) << what;
    EXPECT_NE(what.find("[3, 2]"), std::string::npos) << what;
  }
}

TEST(MetricTest, MeanAbsoluteError) {
  metrics::MeanAbsoluteError mae;
  EXPECT_EQ(mae.name(), "mean_absolute_error");
  auto y_true = doubles({1, 2, 3, 4}).reshape({2, 2});
  auto y_pred = doubles({1, 4, 2, 4}).reshape({2, 2});  // per-example {1, 0.5}
  mae.update_state(y_true, y_pred);
  EXPECT_DOUBLE_EQ(mae.result(), 0.75);
  mae.update_state(doubles({0}), doubles({4}), doubles({2}));
  EXPECT_DOUBLE_EQ(mae.result(), (1 + 0.5 + 8) / 4);
  EXPECT_THROW(mae.update_state(doubles({1, 2}), doubles({1, 2, 3})), InvalidArgument);
}

TEST(MetricTest, ResetStateZeroesEverySlot) {
  metrics::Mean mean;
  run_replicas(3, [&](int r) { mean.update_state(doubles({static_cast<double>(r)})); });
  EXPECT_DOUBLE_EQ(mean.result(), 1);
  mean.reset_state();
  EXPECT_EQ(mean.result(), 0.0);
  EXPECT_EQ(mean.local_states(), (std::vector<State>{{0, 0}, {0, 0}, {0, 0}}));
  mean.update_state(doubles({5}));
  EXPECT_DOUBLE_EQ(mean.result(), 5);
}

TEST(MetricTest, AggregatesSumOfTotalsOverSumOfCounts) {
  metrics::Mean mean;
  run_replicas(2, [&](int r) {
    if (r == 0) mean.update_state(doubles({1}));
    if (r == 1) mean.update_state(doubles({3, 3, 3}));
  });
  EXPECT_EQ(mean.local_states(), (std::vector<State>{{1, 1}, {9, 3}}));
  EXPECT_DOUBLE_EQ(mean.result(), 2.5);  // not the mean of means, 2
}

TEST(MetricTest, OutsideRunUpdatesSlotZero) {
  metrics::Sum sum;
  run_replicas(2, [&](int r) { sum.update_state(doubles({10.0 * (r + 1)})); });
  sum.update_state(doubles({1}));
  EXPECT_EQ(sum.local_states(), (std::vector<State>{{11, 2}, {20, 1}}));
  EXPECT_DOUBLE_EQ(sum.result(), 31);
}

// Concurrent updates from every replica lose nothing: replica r adds the value r + 1,
// (r + 1) * 100 times, so the expected totals are exact.
TEST(MetricTest, ConcurrentUpdatesAreExact) {
  for (int replicas : {1, 2, 3, 4, 7}) {
    metrics::Mean mean;
    metrics::SparseCategoricalAccuracy accuracy;
    run_replicas(replicas, [&](int r) {
      for (int i = 0; i < (r + 1) * 100; ++i) {
        mean.update_state(doubles({static_cast<double>(r + 1)}));
        accuracy.update_state(longs({i % 2}), doubles({1, 0}).reshape({1, 2}));
      }
    });
    auto states = mean.local_states();
    ASSERT_EQ(states.size(), static_cast<size_t>(replicas));
    double total = 0, count = 0;
    for (int r = 0; r < replicas; ++r) {
      EXPECT_EQ(states[r], State((r + 1) * (r + 1) * 100.0, (r + 1) * 100.0));
      total += states[r].first;
      count += states[r].second;
    }
    EXPECT_DOUBLE_EQ(mean.result(), total / count) << replicas << " replicas";
    double examples = 100.0 * replicas * (replicas + 1) / 2;
    double correct = 0;  // label 0 on even i; each replica runs an even count
    for (int r = 0; r < replicas; ++r) correct += (r + 1) * 50;
    EXPECT_DOUBLE_EQ(accuracy.result(), correct / examples) << replicas << " replicas";
  }
}

}  // namespace
}  // namespace dist
