// LossScaleOptimizer: Keras' dynamic loss scaling, exact in float32, and one decision for all
// replicas.
#include "dist/train/loss_scale_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "equivalence_data.h"

namespace dist {
namespace {

using data::Dataset;
using data::Element;

MirroredStrategy two_replicas() {
  MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.threads_per_replica = 1;
  return MirroredStrategy(options);
}

// 20 Adam steps of the tutorial CNN over the equivalence data, with or without loss scaling.
std::vector<torch::Tensor> train_cnn(const Strategy& strategy, bool scaled) {
  torch::manual_seed(7);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto inner =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  LossScaleOptimizer scaling(inner);
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  for (const auto& batch :
       strategy.experimental_distribute_dataset(testing::equivalence_data()).iterator()) {
    strategy.run(
        [&](const Element& b) {
          auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          if (scaled) {
            scaling.scaled_loss(loss).backward();
            scaling.apply_gradients();
          } else {
            loss.backward();
            inner->apply_gradients();
          }
        },
        batch);
  }
  if (scaled) {
    EXPECT_EQ(scaling.loss_scale(), 32768.0);
    EXPECT_EQ(scaling.counter(), 20);
    EXPECT_EQ(scaling.skipped_steps(), 0);
  }
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.primary()->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

void expect_bit_identical(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
}

// Scaling by a power of two and back is exact in floating point, so float32 training with
// loss scaling takes the very same steps.
TEST(LossScaleOptimizerTest, Float32StepsAreBitIdenticalToUnscaledOnes) {
  OneDeviceStrategy one("cpu:0");
  expect_bit_identical(train_cnn(one, true), train_cnn(one, false));
  auto mirrored = two_replicas();
  expect_bit_identical(train_cnn(mirrored, true), train_cnn(mirrored, false));
}

// A linear model and batches of 4 rows, the last row of the first batch holding `bad`.
struct LinearJob {
  explicit LinearJob(const Strategy& s, LossScaleOptions options = {})
      : strategy(s),
        model(s.mirror(torch::nn::Linear(3, 2))),
        inner(s.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1))),
        scaling(inner, options) {}

  // One step on 4 rows; `bad` (inf or nan) replaces one input value of the last row, which
  // is replica 1's under two replicas.
  void step(double bad = 0) {
    auto x = torch::ones({4, 3});
    if (bad != 0) x[3][1] = bad;
    auto data = strategy.experimental_distribute_dataset(
        Dataset::from_tensor_slices({x, torch::zeros({4, 2})}).batch(4));
    for (const auto& batch : data.iterator()) {
      strategy.run(
          [&](const Element& b) {
            auto loss = compute_average_loss((model->forward(b[0]) - b[1]).pow(2).sum(1));
            scaling.scaled_loss(loss).backward();
            scaling.apply_gradients();
          },
          batch);
    }
  }

  std::vector<torch::Tensor> weights() const {
    std::vector<torch::Tensor> w;
    for (const auto& p : model.primary()->parameters()) w.push_back(p.detach().clone());
    return w;
  }

  const Strategy& strategy;
  Mirrored<torch::nn::Linear> model;
  std::shared_ptr<MirroredOptimizer> inner;
  LossScaleOptimizer scaling;
};

TEST(LossScaleOptimizerTest, NonFiniteGradientSkipsTheStepOnEveryReplicaAndHalvesTheScale) {
  auto strategy = two_replicas();
  LinearJob job(strategy);
  job.step();
  EXPECT_TRUE(job.scaling.last_step_applied());
  EXPECT_EQ(job.scaling.counter(), 1);
  const auto before = job.weights();
  // Only replica 1 sees the inf; the all-reduced gradient carries it to both.
  job.step(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(job.scaling.last_step_applied());
  expect_bit_identical(job.weights(), before);
  for (const auto& copy : job.model.replicas()) {
    auto params = copy->parameters();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
  }
  EXPECT_EQ(job.scaling.loss_scale(), 16384.0);
  EXPECT_EQ(job.scaling.counter(), 0);
  EXPECT_EQ(job.scaling.skipped_steps(), 1);
  job.step(std::nan(""));
  EXPECT_EQ(job.scaling.loss_scale(), 8192.0);
  EXPECT_EQ(job.scaling.skipped_steps(), 2);
  // Training goes on from the kept weights.
  job.step();
  EXPECT_TRUE(job.scaling.last_step_applied());
  EXPECT_FALSE(torch::equal(job.weights()[0], before[0]));
  EXPECT_TRUE(torch::isfinite(job.weights()[0]).all().item<bool>());
  EXPECT_EQ(job.scaling.counter(), 1);
}

TEST(LossScaleOptimizerTest, ScaleDoublesAfterGrowthStepsFiniteStepsAndNeverDropsBelowOne) {
  OneDeviceStrategy strategy("cpu:0");
  LossScaleOptions options;
  options.initial_scale = 2;
  options.growth_steps = 3;
  LinearJob job(strategy, options);
  job.step();
  job.step();
  EXPECT_EQ(job.scaling.loss_scale(), 2.0);
  EXPECT_EQ(job.scaling.counter(), 2);
  job.step();
  EXPECT_EQ(job.scaling.loss_scale(), 4.0);
  EXPECT_EQ(job.scaling.counter(), 0);
  for (int i = 0; i < 4; ++i) job.step(std::numeric_limits<double>::infinity());
  EXPECT_EQ(job.scaling.loss_scale(), 1.0) << "halved to 1 and kept there";
  EXPECT_EQ(job.scaling.skipped_steps(), 4);
  job.scaling.set_state(64, 2);
  job.step();
  EXPECT_EQ(job.scaling.loss_scale(), 128.0);
}

TEST(LossScaleOptimizerTest, KerasDefaultsAndFixedScale) {
  OneDeviceStrategy strategy("cpu:0");
  LinearJob dynamic(strategy);
  EXPECT_EQ(dynamic.scaling.loss_scale(), 32768.0);  // 2^15
  LossScaleOptions fixed_options;
  fixed_options.dynamic = false;
  fixed_options.initial_scale = 256;
  LinearJob fixed(strategy, fixed_options);
  fixed.step(std::numeric_limits<double>::infinity());
  // A fixed scale applies every step, as Keras' dynamic=False does.
  EXPECT_TRUE(fixed.scaling.last_step_applied());
  EXPECT_EQ(fixed.scaling.loss_scale(), 256.0);
  EXPECT_EQ(fixed.scaling.skipped_steps(), 0);
}

TEST(LossScaleOptimizerTest, BadOptionsAreNamed) {
  OneDeviceStrategy strategy("cpu:0");
  auto model = strategy.mirror(torch::nn::Linear(3, 2));
  auto inner = strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  auto expect_refused = [&](LossScaleOptions options, const std::string& words) {
    try {
      LossScaleOptimizer scaling(inner, options);
      FAIL() << "accepted options that should be refused: " << words;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  LossScaleOptions o;
  o.initial_scale = 3;
  expect_refused(o, "initial_scale must be a power of two");
  o.initial_scale = 0.5;
  expect_refused(o, "at least 1");
  o = {};
  o.growth_steps = 0;
  expect_refused(o, "growth_steps must be at least 1");
  EXPECT_THROW(LossScaleOptimizer(nullptr), InvalidArgument);
  LossScaleOptimizer scaling(inner);
  EXPECT_THROW(scaling.set_state(100, 0), InvalidArgument);
  EXPECT_THROW(scaling.set_state(64, -1), InvalidArgument);
}

}  // namespace
}  // namespace dist
