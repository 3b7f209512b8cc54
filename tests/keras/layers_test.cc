// Keras layers and models: shapes, parameter counts, summary(), initial weights, and errors.
#include <gtest/gtest.h>

#include <sstream>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/keras/model.h"
#include "dist/models/reference_models.h"
#include "keras/graph_module.h"
#include "keras_test_models.h"
#include "test_util.h"

namespace dist::keras {
namespace {

TEST(KerasLayersTest, TutorialCnnHasKerasShapesParameterCountAndSummary) {
  Model model = testing::keras_tutorial_cnn();
  EXPECT_EQ(model.count_params(), 121930);  // as the tutorial's model.summary() says
  std::ostringstream out;
  model.summary(out);
  const std::string text = out.str();
  EXPECT_NE(text.find("Model: \"tutorial_cnn\""), std::string::npos) << text;
  EXPECT_NE(text.find(" conv1 (Conv2D)"), std::string::npos) << text;
  EXPECT_NE(text.find("(None, 32, 26, 26)"), std::string::npos) << text;
  EXPECT_NE(text.find("(None, 1600)"), std::string::npos) << text;
  EXPECT_NE(text.find("max_pooling2d_1 (MaxPooling2D)"), std::string::npos) << text;
  EXPECT_NE(text.find("102464"), std::string::npos) << text;  // dense1: 1600 * 64 + 64
  EXPECT_NE(text.find("Total params: 121,930"), std::string::npos) << text;
  EXPECT_NE(text.find("Non-trainable params: 0"), std::string::npos) << text;
}

TEST(KerasLayersTest, StartsFromTheSameWeightsAsTheEquivalentSequential) {
  torch::manual_seed(7);
  Model keras_model = testing::keras_tutorial_cnn();
  torch::manual_seed(7);
  auto torch_model = models::make_tutorial_cnn();
  auto ours = keras_model.weights();
  auto theirs = torch_model->named_parameters();
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& [name, tensor] : ours) {
    ASSERT_TRUE(theirs.contains(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, theirs[name])) << name;
  }
  auto x = torch::rand({4, 1, 28, 28});
  EXPECT_TRUE(torch::allclose(keras_model(x), torch_model->forward(x)));
}

TEST(KerasLayersTest, ResidualBlockSummaryCountsBatchNormStatisticsAsNonTrainable) {
  Model model = testing::keras_residual_model();
  std::ostringstream out;
  model.summary(out);
  const std::string text = out.str();
  EXPECT_NE(text.find("input (InputLayer)"), std::string::npos) << text;
  EXPECT_NE(text.find("add (Add)"), std::string::npos) << text;
  EXPECT_NE(text.find("Connected to"), std::string::npos) << text;
  EXPECT_NE(text.find("[re_lu, batch_normalization_1]"), std::string::npos) << text;
  // Stride 2 with "same" padding halves 15 x 15 to 8 x 8 (ceil), as TensorFlow does.
  EXPECT_NE(text.find("(None, 8, 8, 8)"), std::string::npos) << text;
  // BatchNormalization: gamma and beta train; the moving mean and variance do not.
  EXPECT_NE(text.find("Non-trainable params: 32"), std::string::npos) << text;
  auto y = model(torch::rand({3, 1, 15, 15}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{3, 10}));
}

TEST(KerasLayersTest, SamePaddingWithStrideTwoPadsLikeTensorFlow) {
  // 7 -> ceil(7 / 2) = 4 outputs need (4 - 1) * 2 + 3 - 7 = 2 padding: one before, one after.
  KerasTensor input = Input({1, 7, 7});
  auto conv = layers::Conv2D(1, 3).strides(2).padding("same").use_bias(false);
  Model model(input, conv(input));
  EXPECT_EQ(conv(input).shape(), (Shape{1, 4, 4}));
  auto weight = model.weights().front().second;
  torch::NoGradGuard no_grad;
  weight.fill_(1.0);
  auto x = torch::arange(49, torch::kFloat).reshape({1, 1, 7, 7});
  auto expected =
      torch::conv2d(torch::constant_pad_nd(x, {1, 1, 1, 1}), torch::ones({1, 1, 3, 3}), {}, 2);
  EXPECT_TRUE(torch::equal(model(x), expected));
  // An even input needs one row less before than after: 8 -> 4 needs 1 padding, at the end.
  KerasTensor even = Input({1, 8, 8});
  auto conv2 = layers::Conv2D(1, 3).strides(2).padding("same").use_bias(false);
  Model even_model(even, conv2(even));
  even_model.weights().front().second.fill_(1.0);
  auto x8 = torch::arange(64, torch::kFloat).reshape({1, 1, 8, 8});
  auto expected8 =
      torch::conv2d(torch::constant_pad_nd(x8, {0, 1, 0, 1}), torch::ones({1, 1, 3, 3}), {}, 2);
  EXPECT_TRUE(torch::equal(even_model(x8), expected8));
}

TEST(KerasLayersTest, DropoutDropsInTrainingOnlyAndKeepsTheExpectedSum) {
  Model model = Sequential({1000}, {layers::Dropout(0.5)});
  auto x = torch::ones({4, 1000});
  EXPECT_TRUE(torch::equal(model(x), x));  // operator() evaluates: the identity
  model.module()->train();
  auto y = model.module()->as<detail::GraphModuleImpl>()->forward(x);
  const double kept = y.ne(0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.5, 0.03);
  EXPECT_TRUE(
      torch::equal(y.masked_select(y.ne(0)), torch::full({y.ne(0).sum().item<int64_t>()}, 2.0)));
}

TEST(KerasLayersTest, BadDefinitionsGiveErrorsThatNameTheLayer) {
  KerasTensor flat = Input({784});
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layers::Conv2D(8, 3).named("stem")(flat);
            }).find("Conv2D layer 'stem'"),
            std::string::npos);
  KerasTensor image = Input({1, 4, 4});
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layers::Conv2D(8, 5)(image);
            }).find("does not fit"),
            std::string::npos);
  auto a = layers::Dense(3)(flat), b = layers::Dense(4)(flat);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layers::Add()({a, b});
            }).find("one shape"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] { layers::Dense(0); }).find("units"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layers::Dense(3, "swish");
            }).find("unknown activation"),
            std::string::npos);
  auto used = layers::Conv2D(2, 3);
  used(image);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              used.padding("same");
            }).find("already been called"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              auto x = layers::Dense(5).named("twin")(flat);
              Model(flat, layers::Dense(5).named("twin")(x));
            }).find("two layers are named 'twin'"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              Input({0, 3});
            }).find("below 1"),
            std::string::npos);
  Model model = Sequential({4}, {layers::Dense(2)});
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              model.fit(data::Dataset::from_tensor_slices({torch::rand({4, 4})}));
            }).find("not compiled"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              model(torch::rand({2, 5}));
            }).find("expects (batch, 4)"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              model.compile(optimizers::SGD(), SparseCategoricalCrossentropy(true), {"f1"});
            }).find("unknown metric 'f1'"),
            std::string::npos);
  // A failed compile leaves the model as it was: not compiled.
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              model.compile(optimizers::Adam(-1.0), SparseCategoricalCrossentropy(true));
            }).find("rejected its options"),
            std::string::npos);
  EXPECT_FALSE(model.compiled());
}

}  // namespace
}  // namespace dist::keras
