// Model::fit / evaluate / predict under strategies: the core equivalence (N replicas = one
// device on the same global batches), fit = the custom loop, and what the logs report.
#include <gtest/gtest.h>

#include <sstream>

#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/keras/model.h"
#include "equivalence_data.h"
#include "keras_test_models.h"

namespace dist::keras {
namespace {

using testing::quiet;

// The tutorial CNN (seed 7) fitted on equivalence_data() (20 global batches of 10, uneven
// splits, a last batch of 3) under `strategy`.
std::vector<torch::Tensor> fit_cnn(const Strategy& strategy, const Optimizer& optimizer,
                                   int epochs = 1) {
  torch::manual_seed(7);
  Model model = testing::keras_tutorial_cnn();
  model.compile(strategy, optimizer, SparseCategoricalCrossentropy(true), {"accuracy"});
  model.fit(testing::equivalence_data(), quiet(epochs));
  return testing::weight_values(model);
}

TEST(KerasFitTest, FitUnderEveryStrategyEqualsFitOnOneDevice) {
  const auto one_device = fit_cnn(OneDeviceStrategy("cpu:0"), optimizers::Adam(1e-3), 2);
  const auto two = fit_cnn(MirroredStrategy({"cpu:0", "cpu:1"}), optimizers::Adam(1e-3), 2);
  const auto three =
      fit_cnn(MirroredStrategy({"cpu:0", "cpu:1", "cpu:2"}), optimizers::Adam(1e-3), 2);
  MirroredOptions central;
  central.devices = {"cpu:0", "cpu:1"};
  const auto central_storage = fit_cnn(CentralStorageStrategy(central), optimizers::Adam(1e-3), 2);
  EXPECT_LT(testing::max_relative_difference(two, one_device), 1e-5);
  EXPECT_LT(testing::max_relative_difference(three, one_device), 1e-5);
  EXPECT_LT(testing::max_relative_difference(central_storage, one_device), 1e-5);
  // And training moved the weights (an equivalence of untrained models proves nothing).
  torch::manual_seed(7);
  EXPECT_GT(testing::max_relative_difference(one_device,
                                             testing::weight_values(testing::keras_tutorial_cnn())),
            1e-3);
}

TEST(KerasFitTest, FitTakesTheSameStepsAsTheCustomTrainingLoop) {
  // train_equivalence_steps is the tf.distribute custom loop (compute_average_loss, SGD 0.1).
  for (int replicas : {1, 2}) {
    std::vector<std::string> devices;
    for (int r = 0; r < replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
    Strategy strategy = MirroredStrategy(devices);
    const auto custom = testing::train_equivalence_steps(strategy, /*adam=*/false);
    const auto fitted = fit_cnn(strategy, optimizers::SGD(0.1));
    EXPECT_EQ(testing::max_relative_difference(fitted,
                                               [&] {
                                                 std::vector<torch::Tensor> v;
                                                 for (const auto& [n, t] : custom) v.push_back(t);
                                                 return v;
                                               }()),
              0.0)
        << replicas << " replicas";
  }
}

TEST(KerasFitTest, LogsReportGlobalMeansAndEvaluateMatchesAHandComputation) {
  Strategy strategy = MirroredStrategy({"cpu:0", "cpu:1"});
  torch::manual_seed(7);
  Model model = testing::keras_tutorial_cnn();
  model.compile(strategy, optimizers::Adam(1e-3), SparseCategoricalCrossentropy(true),
                {"accuracy"});
  FitOptions options = quiet(2);
  options.validation_data = testing::equivalence_data();
  History history = model.fit(testing::equivalence_data(), options);
  EXPECT_EQ(history.epoch, (std::vector<int>{0, 1}));
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"})
    EXPECT_EQ(history.history[key].size(), 2u) << key;

  // The same numbers by hand: one forward pass over all 193 examples.
  torch::manual_seed(123);
  auto x = torch::rand({193, 1, 28, 28});
  auto y = torch::randint(0, 10, {193});
  auto logits = model(x);
  const double loss = torch::nn::functional::cross_entropy(logits, y).item<double>();
  const double accuracy = logits.argmax(1).eq(y).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(history.history["val_loss"].back(), loss, 1e-5);
  EXPECT_NEAR(history.history["val_accuracy"].back(), accuracy, 1e-12);
  Logs evaluated = model.evaluate(testing::equivalence_data(), {-1, {}, 0, nullptr});
  EXPECT_DOUBLE_EQ(evaluated["loss"], history.history["val_loss"].back());
  EXPECT_DOUBLE_EQ(evaluated["accuracy"], history.history["val_accuracy"].back());

  // predict: every example in order, as the primary copy computes it.
  at::Tensor predicted = model.predict(testing::equivalence_data(), {-1, {}, 0, nullptr});
  ASSERT_EQ(predicted.sizes(), logits.sizes());
  EXPECT_TRUE(torch::allclose(predicted, logits, 1e-5, 1e-6));
}

TEST(KerasFitTest, ProgressLooksLikeKeras) {
  torch::manual_seed(7);
  Model model = testing::keras_tutorial_cnn();
  model.compile(MirroredStrategy({"cpu:0", "cpu:1"}), optimizers::Adam(1e-3),
                SparseCategoricalCrossentropy(true), {"accuracy"});
  std::ostringstream out;
  FitOptions options;
  options.epochs = 2;
  options.out = &out;
  options.validation_data = testing::equivalence_data();
  model.fit(testing::equivalence_data(), options);
  const std::string text = out.str();
  EXPECT_NE(text.find("Epoch 1/2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Epoch 2/2\n"), std::string::npos) << text;
  // "20/20 [==============================] - 0s 12ms/step - loss: 2.3 - accuracy: ... - val_loss"
  EXPECT_NE(text.find("20/20 [==============================] - "), std::string::npos) << text;
  EXPECT_NE(text.find("ms/step - loss: "), std::string::npos) << text;
  const size_t loss = text.find(" - loss: "), accuracy = text.find(" - accuracy: "),
               val_loss = text.find(" - val_loss: "), val_accuracy = text.find(" - val_accuracy: ");
  EXPECT_LT(loss, accuracy);
  EXPECT_LT(accuracy, val_loss);
  EXPECT_LT(val_loss, val_accuracy);
  EXPECT_NE(val_accuracy, std::string::npos);
}

TEST(KerasFitTest, ResidualModelWithBatchNormTrainsUnderMirrored) {
  // Batch norm uses each replica's own batch statistics (as Keras without sync batch norm), so
  // N replicas are not one device here; this checks that it trains and that the copies agree.
  Strategy strategy = MirroredStrategy({"cpu:0", "cpu:1"});
  torch::manual_seed(3);
  Model model = testing::keras_residual_model();
  model.compile(strategy, optimizers::Adam(1e-2), SparseCategoricalCrossentropy(true),
                {"accuracy"});
  torch::manual_seed(5);
  auto x = torch::rand({96, 1, 15, 15});
  auto y = (x.mean({1, 2, 3}) > x.mean()).to(torch::kLong);  // a learnable rule
  auto data = data::Dataset::from_tensor_slices({x, y}).batch(32);
  History history = model.fit(data, quiet(8));
  EXPECT_LT(history.history["loss"].back(), 0.8 * history.history["loss"].front());
}

TEST(KerasFitTest, StepsPerEpochLimitsEachEpoch) {
  torch::manual_seed(7);
  Model model = testing::keras_tutorial_cnn();
  model.compile(MirroredStrategy({"cpu:0", "cpu:1"}), optimizers::SGD(0.1),
                SparseCategoricalCrossentropy(true));
  FitOptions options = quiet(3);
  options.steps_per_epoch = 4;
  model.fit(testing::equivalence_data(), options);
  EXPECT_EQ(model.global_step(), 12);
}

}  // namespace
}  // namespace dist::keras
