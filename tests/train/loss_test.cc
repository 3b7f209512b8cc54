#include "dist/train/loss.h"

#include <cmath>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "collective/local/local_communicator.h"
#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"
#include "expect_error.h"
#include "replica_threads.h"
#include "tensor_literals.h"

namespace dist {
namespace {

using testing::error_of;
using testing::run_replicas;

std::vector<double> to_vector(const torch::Tensor& t) {
  torch::Tensor d = t.detach().to(torch::kDouble).contiguous().flatten();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

double scalar(const torch::Tensor& t) { return t.item<double>(); }

using testing::doubles;
using testing::longs;

// ---- per-example values --------------------------------------------------------------------

TEST(LossTest, SparseCategoricalCrossentropyFromProbabilities) {
  SparseCategoricalCrossentropy loss(false, Reduction::kNone);
  auto probs = doubles({0.25, 0.75, 0.5, 0.5}).reshape({2, 2});
  auto values = to_vector(loss(longs({1, 0}), probs));
  ASSERT_EQ(values.size(), 2u);
  EXPECT_NEAR(values[0], -std::log(0.75), 1e-12);
  EXPECT_NEAR(values[1], -std::log(0.5), 1e-12);
}

TEST(LossTest, SparseCategoricalCrossentropyFromLogits) {
  SparseCategoricalCrossentropy loss(true, Reduction::kNone);
  // softmax([0, ln 3]) = [1/4, 3/4].
  auto logits = doubles({0.0, std::log(3.0), 5.0, 5.0}).reshape({2, 2});
  auto values = to_vector(loss(longs({1, 0}), logits));
  EXPECT_NEAR(values[0], -std::log(0.75), 1e-12);
  EXPECT_NEAR(values[1], std::log(2.0), 1e-12);
}

TEST(LossTest, SparseCategoricalCrossentropyClipsZeroProbability) {
  SparseCategoricalCrossentropy loss(false, Reduction::kNone);
  auto values = to_vector(loss(longs({0}), doubles({0.0, 1.0}).reshape({1, 2})));
  EXPECT_NEAR(values[0], -std::log(1e-7), 1e-6);  // finite, as Keras: 16.118...
}

TEST(LossTest, SparseCategoricalCrossentropyAcceptsLabelsWithTrailingAxis) {
  SparseCategoricalCrossentropy loss(true, Reduction::kNone);
  auto logits = torch::randn({3, 4}, torch::kDouble);
  auto labels = longs({3, 0, 2});
  auto expected = to_vector(loss(labels, logits));
  EXPECT_EQ(to_vector(loss(labels.reshape({3, 1}), logits)), expected);
  EXPECT_EQ(to_vector(loss(labels.to(torch::kByte), logits)), expected);
}

TEST(LossTest, SparseCategoricalCrossentropyRejectsOutOfRangeLabel) {
  SparseCategoricalCrossentropy loss(true);
  auto what = error_of<InvalidArgument>([&] { loss(longs({0, 4}), torch::zeros({2, 4})); });
  EXPECT_NE(what.find("class id 4"), std::string::npos) << what;
  EXPECT_NE(what.find("4 classes"), std::string::npos) << what;
  EXPECT_THROW(loss(longs({-1, 0}), torch::zeros({2, 4})), InvalidArgument);
}

TEST(LossTest, BinaryCrossentropyFromProbabilities) {
  BinaryCrossentropy loss(false, Reduction::kNone);
  auto values =
      to_vector(loss(doubles({1, 0}).reshape({1, 2}), doubles({0.8, 0.4}).reshape({1, 2})));
  ASSERT_EQ(values.size(), 1u);
  double expected = -(std::log(0.8 + 1e-7) + std::log(1 - 0.4 + 1e-7)) / 2;
  EXPECT_NEAR(values[0], expected, 1e-12);
}

TEST(LossTest, BinaryCrossentropyFromLogitsIsStableForLargeLogits) {
  BinaryCrossentropy loss(true, Reduction::kNone);
  auto values = to_vector(loss(doubles({0, 1, 1, 0}), doubles({100, -100, 0, 0})));
  EXPECT_NEAR(values[0], 100.0, 1e-9);
  EXPECT_NEAR(values[1], 100.0, 1e-9);
  EXPECT_NEAR(values[2], std::log(2.0), 1e-12);
  EXPECT_NEAR(values[3], std::log(2.0), 1e-12);
}

TEST(LossTest, BinaryCrossentropyFromLogitsMatchesProbabilities) {
  auto logits = doubles({-2, -0.5, 0.5, 2});
  auto labels = doubles({0, 1, 1, 0});
  auto from_logits = BinaryCrossentropy(true, Reduction::kNone)(labels, logits);
  auto from_probs = BinaryCrossentropy(false, Reduction::kNone)(labels, torch::sigmoid(logits));
  EXPECT_TRUE(torch::allclose(from_logits, from_probs, 1e-6, 1e-6));
}

TEST(LossTest, MeanAbsoluteAndSquaredErrorAverageOverLastAxis) {
  auto y_true = doubles({1, 2, 3, 4}).reshape({2, 2});
  auto y_pred = doubles({1, 4, 2, 4}).reshape({2, 2});
  EXPECT_EQ(to_vector(MeanAbsoluteError(Reduction::kNone)(y_true, y_pred)),
            (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(to_vector(MeanSquaredError(Reduction::kNone)(y_true, y_pred)),
            (std::vector<double>{2.0, 0.5}));
}

TEST(LossTest, RankOneInputsAreElementWise) {
  auto y_true = doubles({1, 2, 3});
  auto y_pred = doubles({2, 2, 5});
  EXPECT_EQ(to_vector(MeanAbsoluteError(Reduction::kNone)(y_true, y_pred)),
            (std::vector<double>{1, 0, 2}));
  EXPECT_EQ(to_vector(MeanSquaredError(Reduction::kNone)(y_true, y_pred)),
            (std::vector<double>{1, 0, 4}));
  // [N] labels against [N, 1] outputs, as binary classifiers produce.
  EXPECT_EQ(to_vector(MeanSquaredError(Reduction::kNone)(y_true, y_pred.reshape({3, 1}))),
            (std::vector<double>{1, 0, 4}));
}

// ---- reductions -----------------------------------------------------------------------------

TEST(LossTest, Reductions) {
  auto y_true = doubles({1, 2, 3, 4}).reshape({2, 2});
  auto y_pred = doubles({1, 4, 2, 4}).reshape({2, 2});  // per-example MAE {1, 0.5}
  auto weight = doubles({2, 4});
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError(Reduction::kSum)(y_true, y_pred)), 1.5);
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError(Reduction::kSumOverBatchSize)(y_true, y_pred)), 0.75);
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError()(y_true, y_pred)), 0.75);
  EXPECT_EQ(to_vector(MeanAbsoluteError(Reduction::kNone)(y_true, y_pred, weight)),
            (std::vector<double>{2, 2}));
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError(Reduction::kSum)(y_true, y_pred, weight)), 4);
  // Keras divides by the number of examples, not by the sum of the weights.
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError()(y_true, y_pred, weight)), 2);
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError()(y_true, y_pred, weight.reshape({2, 1}))), 2);
  EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError()(y_true, y_pred, torch::tensor(3.0))), 2.25);
}

TEST(LossTest, EmptyBatchAveragesToZero) {
  auto empty = torch::zeros({0, 3});
  for (auto reduction : {Reduction::kAuto, Reduction::kSumOverBatchSize, Reduction::kSum}) {
    auto value = MeanSquaredError(reduction)(empty, empty);
    EXPECT_EQ(scalar(value), 0.0) << to_string(reduction);
  }
  auto value = SparseCategoricalCrossentropy(true)(torch::zeros({0}, torch::kLong), empty);
  EXPECT_EQ(scalar(value), 0.0);
}

TEST(LossTest, ShapeMismatchNamesBothShapes) {
  auto what = error_of<InvalidArgument>([] {
    MeanSquaredError()(torch::zeros({2, 3}), torch::zeros({3, 2}));
  });
  EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
  EXPECT_NE(what.find("[3, 2]"), std::string::npos) << what;
  what = error_of<InvalidArgument>([] {
    SparseCategoricalCrossentropy()(torch::zeros({4}, torch::kLong), torch::zeros({3, 2}));
  });
  EXPECT_NE(what.find("[4]"), std::string::npos) << what;
  EXPECT_NE(what.find("[3, 2]"), std::string::npos) << what;
  EXPECT_THROW(BinaryCrossentropy()(torch::zeros({3}), torch::zeros({4})), InvalidArgument);
}

TEST(LossTest, SampleWeightShapeMismatchNamesBothShapes) {
  auto what = error_of<InvalidArgument>([] {
    MeanSquaredError()(torch::zeros({4, 2}), torch::zeros({4, 2}), torch::ones({3}));
  });
  EXPECT_NE(what.find("[3]"), std::string::npos) << what;
  EXPECT_NE(what.find("[4]"), std::string::npos) << what;
}

TEST(LossTest, NameAndReduction) {
  EXPECT_EQ(SparseCategoricalCrossentropy().name(), "sparse_categorical_crossentropy");
  EXPECT_EQ(BinaryCrossentropy().name(), "binary_crossentropy");
  EXPECT_EQ(MeanAbsoluteError().name(), "mean_absolute_error");
  EXPECT_EQ(MeanSquaredError(Reduction::kSum).name(), "mean_squared_error");
  EXPECT_EQ(MeanSquaredError(Reduction::kSum).reduction(), Reduction::kSum);
  EXPECT_EQ(BinaryCrossentropy().reduction(), Reduction::kAuto);
}

TEST(LossTest, GradientFlowsToPredictions) {
  auto y_pred = doubles({1, 4}).requires_grad_(true);
  MeanSquaredError(Reduction::kSum)(doubles({0, 0}), y_pred).backward();
  EXPECT_EQ(to_vector(y_pred.grad()), (std::vector<double>{2, 8}));
}

// ---- the guard against local-batch averaging under a strategy ------------------------------

TEST(LossGuardTest, AutoAndSumOverBatchSizeRejectedInMultiReplicaRun) {
  for (int replicas : {2, 3}) {
    for (auto reduction : {Reduction::kAuto, Reduction::kSumOverBatchSize}) {
      run_replicas(replicas, -1, [&](int) {
        MeanSquaredError loss(reduction);
        auto what = error_of<InvalidArgument>([&] { loss(torch::ones({2}), torch::ones({2})); });
        EXPECT_NE(what.find("Reduction::kNone"), std::string::npos) << what;
        EXPECT_NE(what.find("compute_average_loss(per_example_loss, global_batch_size)"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("local batch size"), std::string::npos) << what;
        EXPECT_NE(what.find("mean_squared_error"), std::string::npos) << what;
        const char* used =
            reduction == Reduction::kAuto ? "Reduction::kAuto" : "Reduction::kSumOverBatchSize";
        EXPECT_NE(what.find(used), std::string::npos) << what;
      });
    }
  }
}

TEST(LossGuardTest, NoneAndSumAllowedInMultiReplicaRun) {
  run_replicas(2, 4, [](int) {
    auto per_example = SparseCategoricalCrossentropy(true, Reduction::kNone)(
        longs({0, 1}), torch::zeros({2, 2}, torch::kDouble));
    EXPECT_NEAR(scalar(compute_average_loss(per_example)), 2 * std::log(2.0) / 4, 1e-12);
    EXPECT_DOUBLE_EQ(scalar(MeanAbsoluteError(Reduction::kSum)(doubles({1}), doubles({3}))), 2);
  });
}

TEST(LossGuardTest, AutoAllowedWithOneReplicaAndOutsideRun) {
  MeanAbsoluteError loss;
  EXPECT_DOUBLE_EQ(scalar(loss(doubles({1, 2}), doubles({3, 2}))), 1);
  run_replicas(1, 2, [&](int) {
    EXPECT_DOUBLE_EQ(scalar(loss(doubles({1, 2}), doubles({3, 2}))), 1);
  });
}

// ---- compute_average_loss and scale_regularization_loss ------------------------------------

TEST(ComputeAverageLossTest, DividesBySumOverGlobalBatch) {
  EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({2, 3}), 4)), 1.25);
  EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({4, 5}), 4)), 2.25);
}

TEST(ComputeAverageLossTest, TakesGlobalBatchSizeFromReplicaContext) {
  // Global batch {2, 3, 4, 5, 6} split unevenly: {2, 3, 4} and {5, 6}.
  std::vector<double> results(2);
  run_replicas(2, 5, [&](int r) {
    auto local = r == 0 ? doubles({2, 3, 4}) : doubles({5, 6});
    results[r] = scalar(compute_average_loss(local));
  });
  EXPECT_DOUBLE_EQ(results[0], 9.0 / 5);
  EXPECT_DOUBLE_EQ(results[1], 11.0 / 5);
  EXPECT_DOUBLE_EQ(results[0] + results[1], 4.0);  // the mean of the global batch
}

TEST(ComputeAverageLossTest, ExplicitGlobalBatchSizeWinsOverContext) {
  run_replicas(2, 5,
               [](int) { EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({4}), 8)), 0.5); });
}

TEST(ComputeAverageLossTest, UnknownGlobalBatchInMultiReplicaRunThrows) {
  run_replicas(2, -1, [](int) {
    auto what = error_of<InvalidArgument>([] { compute_average_loss(doubles({1, 2})); });
    EXPECT_NE(what.find("global_batch_size"), std::string::npos) << what;
    EXPECT_NE(what.find("distributed dataset"), std::string::npos) << what;
  });
}

TEST(ComputeAverageLossTest, OutsideRunUsesLocalBatchSize) {
  EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({1, 2, 6}))), 3);
  EXPECT_DOUBLE_EQ(scalar(compute_average_loss(torch::tensor(5.0, torch::kDouble))), 5);
  // One replica with an unknown global batch is the same as no strategy.
  run_replicas(1, -1, [](int) {
    EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({1, 3}))), 2);
  });
}

TEST(ComputeAverageLossTest, AppliesSampleWeight) {
  EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({2, 3}), 4, doubles({1, 2}))), 2);
  EXPECT_DOUBLE_EQ(scalar(compute_average_loss(doubles({2, 3}), 4, torch::tensor(2.0))), 2.5);
  EXPECT_THROW(compute_average_loss(doubles({2, 3}), 4, doubles({1, 2, 3})), InvalidArgument);
}

TEST(ComputeAverageLossTest, EmptyReplicaBatchGivesZeroWithGradient) {
  // 1 example over 2 replicas: replica 1 gets none but must still produce a loss to backprop.
  auto w = torch::tensor(3.0, torch::kDouble).requires_grad_(true);
  auto per_example = w * torch::zeros({0}, torch::kDouble);
  auto loss = compute_average_loss(per_example, 1);
  EXPECT_EQ(scalar(loss), 0.0);
  loss.backward();
  EXPECT_EQ(w.grad().item<double>(), 0.0);
}

TEST(ComputeAverageLossTest, ZeroGlobalBatchGivesZero) {
  auto loss = compute_average_loss(torch::zeros({0}), 0);
  EXPECT_EQ(scalar(loss), 0.0);
  EXPECT_FALSE(std::isnan(scalar(loss)));
  EXPECT_EQ(scalar(compute_average_loss(torch::zeros({0}))), 0.0);  // local size 0
  EXPECT_THROW(compute_average_loss(doubles({1}), 0), InvalidArgument);
}

TEST(ComputeAverageLossTest, RejectsNegativeGlobalBatchSize) {
  auto what = error_of<InvalidArgument>([] { compute_average_loss(doubles({1}), -2); });
  EXPECT_NE(what.find("-2"), std::string::npos) << what;
}

// Semantics 1 of the design, in small: with compute_average_loss, the replicas' summed
// gradients equal the one-device gradient of the mean loss, for uneven splits too.
TEST(ComputeAverageLossTest, SummedReplicaGradientsEqualOneDeviceGradient) {
  auto x = doubles({1, 2, 3, 4, 5, 6, 7});
  auto y = doubles({2, 1, 0, 3, 5, 4, 9});
  auto w0 = torch::tensor(0.5, torch::kDouble);
  auto one_device = w0.clone().requires_grad_(true);
  MeanSquaredError(Reduction::kAuto)(y, one_device * x).backward();
  double expected = one_device.grad().item<double>();
  for (int replicas : {1, 2, 3, 4, 7}) {
    std::vector<double> grads(replicas);
    run_replicas(replicas, x.size(0), [&](int r) {
      // Even split with the remainder on the first replicas, as distributed datasets do.
      int64_t base = x.size(0) / replicas, extra = x.size(0) % replicas;
      int64_t begin = r * base + std::min<int64_t>(r, extra);
      int64_t end = begin + base + (r < extra ? 1 : 0);
      auto w = w0.clone().requires_grad_(true);
      auto per_example =
          MeanSquaredError(Reduction::kNone)(y.slice(0, begin, end), w * x.slice(0, begin, end));
      compute_average_loss(per_example).backward();
      grads[r] = w.grad().item<double>();
    });
    double summed = 0;
    for (double g : grads) summed += g;
    EXPECT_NEAR(summed, expected, 1e-12) << replicas << " replicas";
  }
}

TEST(LossScaleRegularizationTest, DividesByReplicaCount) {
  EXPECT_DOUBLE_EQ(scalar(scale_regularization_loss(torch::tensor(6.0))), 6);
  for (int replicas : {1, 2, 3}) {
    run_replicas(replicas, -1, [&](int) {
      EXPECT_DOUBLE_EQ(scalar(scale_regularization_loss(torch::tensor(6.0, torch::kDouble))),
                       6.0 / replicas);
    });
  }
}

}  // namespace
}  // namespace dist
