// Keras's Dropout layer: masks that are a function of its seed and the example, so the same
// for any number of replicas, resumed from a checkpoint, the identity in evaluation, and a
// counter that is not a weight.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/data/dataset.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/keras/functional.h"
#include "dist/keras/model.h"
#include "dist/train/checkpoint.h"
#include "keras/layer_testing.h"
#include "test_util.h"

namespace dist::keras {
namespace {

using data::Dataset;
using data::Element;
using layer_testing::one_layer;

// ---------------------------------------------------------------- Dropout

Functional dropout_model(double rate, uint64_t seed) {
  return one_layer({3, 4, 5}, layers::Dropout(rate).seed(seed));
}

// Each step's output for the global batches of `x` (batches of `batch`) under a
// MirroredStrategy of `replicas` replicas, in training mode.
std::vector<torch::Tensor> mirrored_dropout(int replicas, const torch::Tensor& x, int64_t batch) {
  MirroredOptions options;
  for (int r = 0; r < replicas; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.threads_per_replica = 1;
  MirroredStrategy strategy(options);
  auto model = strategy.mirror(dropout_model(0.5, 42));
  model.train();
  std::vector<torch::Tensor> outputs;
  auto ds = strategy.experimental_distribute_dataset(Dataset::from_tensor_slices({x}).batch(batch));
  for (const auto& global : ds.iterator()) {
    auto out = strategy.run([&](const Element& b) { return model->forward(b[0]); }, global);
    outputs.push_back(strategy.gather(out));
  }
  return outputs;
}

TEST(ImageLayersTest, DropoutMasksDoNotDependOnTheNumberOfReplicas) {
  torch::manual_seed(4);
  // Three global batches of 7 (7 splits unevenly: 4 + 3, 3 + 2 + 2, 2 + 2 + 2 + 1).
  auto x = torch::rand({21, 3, 4, 5}) + 0.5;
  const auto one = mirrored_dropout(1, x, 7);
  ASSERT_EQ(one.size(), 3u);
  // Outside any strategy: the same as one replica.
  Functional plain = dropout_model(0.5, 42);
  plain->train();
  for (int step = 0; step < 3; ++step)
    EXPECT_TRUE(torch::equal(plain->forward(x.slice(0, 7 * step, 7 * step + 7)), one[step]));
  for (int replicas : {2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << replicas << " replicas");
    const auto many = mirrored_dropout(replicas, x, 7);
    ASSERT_EQ(many.size(), one.size());
    for (size_t step = 0; step < one.size(); ++step)
      EXPECT_TRUE(torch::equal(many[step], one[step])) << "step " << step;
  }
  // Each call draws a new mask, and examples at the same place of two batches differ too.
  const auto first = x.slice(0, 0, 7);
  Functional again = dropout_model(0.5, 42);
  again->train();
  auto a = again->forward(first), b = again->forward(first);
  EXPECT_FALSE(torch::equal(a.eq(0), b.eq(0)));
  EXPECT_FALSE(torch::equal(a[0].eq(0), a[1].eq(0)));
  // Another seed, other masks.
  Functional other = dropout_model(0.5, 43);
  other->train();
  EXPECT_FALSE(torch::equal(other->forward(first).eq(0), one[0].eq(0)));
}

TEST(ImageLayersTest, DropoutInSeveralReplicasNeedsADistributedBatch) {
  MirroredStrategy strategy(std::vector<std::string>{"cpu:0", "cpu:1"});
  auto model = strategy.mirror(dropout_model(0.5, 0));
  model.train();
  auto x = torch::rand({2, 3, 4, 5});
  std::string error = "no error";
  try {
    strategy.run([&] { model->forward(x); });
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_CONTAINS(error, "Dropout layer 'dropout'");
  EXPECT_CONTAINS(error, "distributed dataset");
}

TEST(ImageLayersTest, DropoutResumesItsSequenceFromACheckpoint) {
  auto x = torch::rand({5, 3, 4, 5}) + 0.5;
  Functional model = dropout_model(0.3, 9);
  model->train();
  auto y1 = model->forward(x);
  const std::string path = ::testing::TempDir() + "/dropout_calls.ckpt";
  Checkpoint(model.ptr(), nullptr).write(path);
  auto y2 = model->forward(x);
  auto y3 = model->forward(x);
  EXPECT_EQ(model->named_buffers()["dropout.calls"].item<int64_t>(), 3);

  Functional resumed = dropout_model(0.3, 9);
  resumed->train();
  Checkpoint(resumed.ptr(), nullptr).read(path);
  EXPECT_EQ(resumed->named_buffers()["dropout.calls"].item<int64_t>(), 1);
  EXPECT_TRUE(torch::equal(resumed->forward(x), y2));
  EXPECT_TRUE(torch::equal(resumed->forward(x), y3));
  // Without the counter, a new module starts the sequence over.
  Functional fresh = dropout_model(0.3, 9);
  fresh->train();
  EXPECT_TRUE(torch::equal(fresh->forward(x), y1));
  // A clone (what strategies make per replica) carries the counter.
  auto copy = std::dynamic_pointer_cast<FunctionalImpl>(resumed->clone());
  ASSERT_NE(copy, nullptr);
  copy->train();
  EXPECT_TRUE(torch::equal(copy->forward(x), model->forward(x)));  // both at call 3
  std::remove(path.c_str());
}

TEST(ImageLayersTest, DropoutIsTheIdentityInEvaluationAndAtRateZero) {
  auto x = torch::rand({4, 3, 4, 5});
  Functional model = dropout_model(0.5, 1);
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(x), x));
  EXPECT_EQ(model->named_buffers()["dropout.calls"].item<int64_t>(), 0);  // not counted
  Functional zero = dropout_model(0.0, 1);
  zero->train();
  EXPECT_TRUE(torch::equal(zero->forward(x), x));
}

TEST(ImageLayersTest, DropoutKeepsOneMinusRateAndScalesTheKept) {
  Functional model = one_layer({100000}, layers::Dropout(0.3).seed(5));
  model->train();
  auto x = torch::ones({8, 100000}, torch::requires_grad());
  auto y = model->forward(x);
  const double kept = y.ne(0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.7, 0.003);
  auto kept_values = y.masked_select(y.ne(0));
  EXPECT_TRUE(torch::allclose(kept_values, torch::full_like(kept_values, 1 / 0.7)));
  // The gradient goes through the kept elements only, scaled the same.
  y.sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), y.detach()));
  // Double precision keeps its own dtype.
  auto yd = model->forward(torch::ones({2, 100000}, torch::kDouble));
  EXPECT_EQ(yd.scalar_type(), torch::kDouble);
}

TEST(ImageLayersTest, DropoutCounterIsNotAWeight) {
  Model model = Sequential({3, 4, 5}, {layers::Conv2D(2, 3), layers::Dropout(0.5)}, "drop");
  for (const auto& [name, tensor] : model.weights()) EXPECT_NE(name, "dropout.calls");
  EXPECT_EQ(model.weights().size(), 2u);
  EXPECT_EQ(model.count_params(), 3 * 2 * 9 + 2);
  std::ostringstream out;
  model.summary(out);
  EXPECT_CONTAINS(out.str(), "Non-trainable params: 0");
  auto buffers = model.module()->named_buffers();
  ASSERT_TRUE(buffers.contains("dropout.calls"));
  EXPECT_EQ(buffers["dropout.calls"].scalar_type(), torch::kLong);
  EXPECT_EQ(buffers["dropout.calls"].dim(), 0);
  // save/load_weights do not need it either.
  const std::string path = ::testing::TempDir() + "/dropout_weights.safetensors";
  model.save_weights(path);
  model.load_weights(path);
  std::remove(path.c_str());
}

// ---------------------------------------------------------------- a small U-Net
}  // namespace
}  // namespace dist::keras
