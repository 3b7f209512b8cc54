// The layers of image-to-image models (Conv2DTranspose, LeakyReLU, InstanceNormalization,
// Concatenate, Activation, ZeroPadding2D) against hand computations, and a small U-Net of them.
// Dropout: dropout_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "dist/core/error.h"
#include "dist/keras/functional.h"
#include "dist/keras/model.h"
#include "keras/layer_testing.h"
#include "test_util.h"

namespace dist::keras {
namespace {

using layer_testing::one_layer;

// A float tensor of `values` (torch::tensor wants one literal type: 1.0f, not 1).
torch::Tensor floats(std::vector<float> values, std::vector<int64_t> shape) {
  return torch::tensor(values).reshape(shape);
}

// ---------------------------------------------------------------- Conv2DTranspose

// The definition of TensorFlow's conv2d_transpose, element by element: input (i, j) times tap
// (t, u) lands on output (i * s + t - before, j * s + u - before), where `before` is the
// padding a forward convolution from the output's size to the input's would put first.
torch::Tensor reference_transpose(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias, int64_t s, int64_t out_h,
                                  int64_t out_w, int64_t before) {
  const int64_t n = x.size(0), c_in = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t c_out = weight.size(1), k = weight.size(2);
  auto xa = x.accessor<float, 4>();
  auto wa = weight.accessor<float, 4>();
  torch::Tensor out = torch::zeros({n, c_out, out_h, out_w});
  auto oa = out.accessor<float, 4>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < c_out; ++o) {
      for (int64_t r = 0; r < out_h; ++r)
        for (int64_t q = 0; q < out_w; ++q)
          oa[b][o][r][q] = bias.defined() ? bias[o].item<float>() : 0;
      for (int64_t c = 0; c < c_in; ++c)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < w; ++j)
            for (int64_t t = 0; t < k; ++t)
              for (int64_t u = 0; u < k; ++u) {
                const int64_t r = i * s + t - before, q = j * s + u - before;
                if (r >= 0 && r < out_h && q >= 0 && q < out_w)
                  oa[b][o][r][q] += xa[b][c][i][j] * wa[c][o][t][u];
              }
    }
  return out;
}

TEST(ImageLayersTest, Conv2DTransposeHasKerasOutputSizes) {
  struct Case {
    int64_t kernel, strides;
    std::string padding;
    int64_t in, out;
  };
  const std::vector<Case> cases = {
      {3, 1, "same", 5, 5},  {3, 2, "same", 5, 10}, {4, 2, "same", 8, 16},  {2, 1, "same", 4, 4},
      {5, 3, "same", 4, 12}, {1, 2, "same", 3, 6},  {3, 2, "valid", 5, 11}, {4, 2, "valid", 4, 10},
      {1, 3, "valid", 2, 6}, {3, 1, "valid", 1, 3}, {4, 4, "valid", 2, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "kernel " << c.kernel << " strides " << c.strides << " "
                                      << c.padding << " in " << c.in);
    KerasTensor input = Input({2, c.in, c.in + 1});
    auto layer = layers::Conv2DTranspose(3, c.kernel).strides(c.strides).padding(c.padding);
    KerasTensor y = layer(input);
    const int64_t out_w = c.padding == "same"
                              ? (c.in + 1) * c.strides
                              : (c.in + 1) * c.strides + std::max<int64_t>(c.kernel - c.strides, 0);
    EXPECT_EQ(y.shape(), (Shape{3, c.out, out_w}));
    Functional model(input, y);
    EXPECT_EQ(model->forward(torch::rand({2, 2, c.in, c.in + 1})).sizes(),
              (std::vector<int64_t>{2, 3, c.out, out_w}));
  }
}

TEST(ImageLayersTest, Conv2DTransposePlacesOutputsAsTensorFlow) {
  // (kernel, strides, padding): odd and even implied paddings, kernels below the stride.
  const std::vector<std::tuple<int64_t, int64_t, std::string>> cases = {
      {4, 2, "same"},  {3, 2, "same"},  {3, 1, "same"},  {2, 1, "same"},
      {5, 2, "same"},  {1, 2, "same"},  {2, 3, "same"},  {6, 3, "same"},
      {3, 2, "valid"}, {4, 2, "valid"}, {1, 2, "valid"}, {2, 1, "valid"},
  };
  torch::manual_seed(3);
  for (const auto& [k, s, padding] : cases) {
    SCOPED_TRACE(::testing::Message() << "kernel " << k << " strides " << s << " " << padding);
    Functional model =
        one_layer({2, 3, 4}, layers::Conv2DTranspose(3, k).strides(s).padding(padding));
    auto params = model->named_parameters();
    torch::Tensor x = torch::randn({2, 2, 3, 4});
    const int64_t before = padding == "same" ? std::max<int64_t>(k - s, 0) / 2 : 0;
    const int64_t out_h = padding == "same" ? 3 * s : 3 * s + std::max<int64_t>(k - s, 0);
    const int64_t out_w = padding == "same" ? 4 * s : 4 * s + std::max<int64_t>(k - s, 0);
    torch::Tensor expected =
        reference_transpose(x, params["conv2d_transpose.weight"], params["conv2d_transpose.bias"],
                            s, out_h, out_w, before);
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::allclose(model->forward(x), expected, 1e-5, 1e-5));
  }
}

TEST(ImageLayersTest, Conv2DTransposeSameMatchesHandComputedValues) {
  // Input [[1, 2], [3, 4]], an all-ones kernel, no bias. Kernel 3, strides 2: TensorFlow pads
  // the implied forward convolution 0 before and 1 after, so the output is the first 4 x 4 of
  // the full 5 x 5 scatter (LibTorch's usual padding 1, output_padding 1 would shift it by one).
  auto x = floats({1.0f, 2.0f, 3.0f, 4.0f}, {1, 1, 2, 2});
  auto check = [&](int64_t kernel, std::vector<float> expected) {
    Functional model = one_layer(
        {1, 2, 2}, layers::Conv2DTranspose(1, kernel).strides(2).padding("same").use_bias(false));
    torch::NoGradGuard no_grad;
    model->parameters().front().fill_(1.0);
    EXPECT_TRUE(torch::equal(model->forward(x), floats(expected, {1, 1, 4, 4})))
        << model->forward(x);
  };
  check(3, {1, 1, 3, 2, 1, 1, 3, 2, 4, 4, 10, 6, 3, 3, 7, 4});
  // Kernel 4, strides 2 (pix2pix): 1 before and 1 after, twice the input's size.
  check(4, {1, 3, 3, 2, 4, 10, 10, 6, 4, 10, 10, 6, 3, 7, 7, 4});
}

TEST(ImageLayersTest, Conv2DTransposeActivationAndErrors) {
  Functional model = one_layer({1, 2, 2}, layers::Conv2DTranspose(1, 1).activation("relu"));
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()["conv2d_transpose.weight"].fill_(-1.0);
    model->named_parameters()["conv2d_transpose.bias"].fill_(0.5);
  }
  auto y = model->forward(floats({0.0f, 1, 2, 0.25}, {1, 1, 2, 2}));
  EXPECT_TRUE(torch::equal(y, floats({0.5f, 0, 0, 0.25}, {1, 1, 2, 2})));
  KerasTensor flat = Input({16});
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>(
                      [&] { layers::Conv2DTranspose(4, 3).named("up")(flat); }),
                  "Conv2DTranspose layer 'up' expects one example of shape (channels");
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>([&] { layers::Conv2DTranspose(0, 3); }),
                  "filters >= 1");
  EXPECT_CONTAINS(
      testing::message_of<InvalidArgument>([&] { layers::Conv2DTranspose(2, 3).strides(0); }),
      "strides");
  EXPECT_CONTAINS(
      testing::message_of<InvalidArgument>([&] { layers::Conv2DTranspose(2, 3).padding("full"); }),
      "unknown padding 'full'");
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>(
                      [&] { layers::Conv2DTranspose(2, 3).activation("gelu"); }),
                  "unknown activation 'gelu'");
}

// ---------------------------------------------------------------- LeakyReLU, Activation

TEST(ImageLayersTest, LeakyReLUScalesNegativesByAlpha) {
  auto x = floats({-2.0f, -0.5f, 0.0f, 1.5f}, {1, 4});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(one_layer({4}, layers::LeakyReLU())->forward(x),
                              floats({-0.6f, -0.15f, 0.0f, 1.5f}, {1, 4})));
  EXPECT_TRUE(torch::allclose(one_layer({4}, layers::LeakyReLU(0.2))->forward(x),
                              floats({-0.4f, -0.1f, 0.0f, 1.5f}, {1, 4})));
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>([] { layers::LeakyReLU(-1); }),
                  "LeakyReLU alpha");
}

TEST(ImageLayersTest, ActivationAppliesEachNamedFunction) {
  torch::manual_seed(1);
  auto x = torch::randn({2, 3, 2, 2});
  torch::NoGradGuard no_grad;
  auto run = [&](const std::string& name) {
    return one_layer({3, 2, 2}, layers::Activation(name))->forward(x);
  };
  EXPECT_TRUE(torch::equal(run("tanh"), torch::tanh(x)));
  EXPECT_TRUE(torch::equal(run("sigmoid"), torch::sigmoid(x)));
  EXPECT_TRUE(torch::equal(run("relu"), torch::relu(x)));
  EXPECT_TRUE(torch::equal(run("linear"), x));
  // Softmax over channels: each pixel's channels sum to 1.
  EXPECT_TRUE(torch::allclose(run("softmax"), torch::softmax(x, 1)));
  EXPECT_TRUE(torch::allclose(run("softmax").sum(1), torch::ones({2, 2, 2})));
  const std::string error =
      testing::message_of<InvalidArgument>([] { layers::Activation("swish"); });
  EXPECT_CONTAINS(error, "unknown activation 'swish'");
  EXPECT_CONTAINS(error, "tanh, sigmoid, relu, softmax or linear");
}

// ---------------------------------------------------------------- InstanceNormalization

TEST(ImageLayersTest, InstanceNormalizationNormalizesEachExampleAndChannel) {
  torch::manual_seed(2);
  Functional model = one_layer({3, 4, 5}, layers::InstanceNormalization());
  auto params = model->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_TRUE(torch::equal(params["instance_normalization.gamma"], torch::ones({3})));
  EXPECT_TRUE(torch::equal(params["instance_normalization.beta"], torch::zeros({3})));
  EXPECT_TRUE(model->buffers().empty());  // no moving statistics
  torch::Tensor gamma = torch::randn({3}), beta = torch::randn({3});
  {
    torch::NoGradGuard no_grad;
    params["instance_normalization.gamma"].copy_(gamma);
    params["instance_normalization.beta"].copy_(beta);
  }
  // Examples with different scales and offsets, so that batch statistics would differ.
  torch::Tensor x = torch::randn({2, 3, 4, 5}) * torch::tensor({1.0f, 10.0f}).view({2, 1, 1, 1}) +
                    torch::tensor({0.0f, 3.0f}).view({2, 1, 1, 1});
  torch::Tensor mean = x.mean({2, 3}, /*keepdim=*/true);
  torch::Tensor variance = (x - mean).pow(2).mean({2, 3}, /*keepdim=*/true);
  torch::Tensor expected = (x - mean) / torch::sqrt(variance + 1e-3) * gamma.view({1, 3, 1, 1}) +
                           beta.view({1, 3, 1, 1});
  EXPECT_TRUE(torch::allclose(model->forward(x), expected, 1e-5, 1e-5));
  model->eval();  // the same in inference: no moving statistics
  EXPECT_TRUE(torch::allclose(model->forward(x), expected, 1e-5, 1e-5));

  // A constant channel: epsilon keeps it finite (0 / sqrt(0 + 1e-3)).
  Functional plain = one_layer({3, 4, 5}, layers::InstanceNormalization().epsilon(0.5));
  auto y = plain->forward(torch::full({1, 3, 4, 5}, 7.0));
  EXPECT_TRUE(torch::allclose(y, torch::zeros({1, 3, 4, 5}), 0, 1e-5));
  EXPECT_TRUE(
      torch::allclose(plain->forward(x), (x - mean) / torch::sqrt(variance + 0.5), 1e-5, 1e-5));
}

TEST(ImageLayersTest, InstanceNormalizationCenterAndScaleChooseTheWeights) {
  auto names = [](const Functional& model) {
    std::vector<std::string> out;
    for (const auto& p : model->named_parameters()) out.push_back(p.key());
    return out;
  };
  EXPECT_EQ(names(one_layer({2, 3, 3}, layers::InstanceNormalization().center(false))),
            std::vector<std::string>{"instance_normalization.gamma"});
  EXPECT_EQ(names(one_layer({2, 3, 3}, layers::InstanceNormalization().scale(false))),
            std::vector<std::string>{"instance_normalization.beta"});
  Functional bare =
      one_layer({2, 3, 3}, layers::InstanceNormalization().center(false).scale(false));
  EXPECT_TRUE(names(bare).empty());
  auto x = torch::randn({2, 2, 3, 3});
  auto mean = x.mean({2, 3}, true);
  auto var = x.var({2, 3}, /*unbiased=*/false, /*keepdim=*/true);
  EXPECT_TRUE(torch::allclose(bare->forward(x), (x - mean) / torch::sqrt(var + 1e-3), 1e-5, 1e-5));
  KerasTensor flat = Input({8});
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>(
                      [&] { layers::InstanceNormalization().named("norm")(flat); }),
                  "InstanceNormalization layer 'norm' normalizes each channel");
  EXPECT_CONTAINS(
      testing::message_of<InvalidArgument>([] { layers::InstanceNormalization().epsilon(0); }),
      "epsilon");
}

// ---------------------------------------------------------------- Concatenate, ZeroPadding2D

TEST(ImageLayersTest, ConcatenateJoinsAlongTheExampleAxis) {
  KerasTensor input = Input({2, 4, 4});
  KerasTensor a = layers::ReLU()(input);
  KerasTensor b = layers::Conv2D(3, 1)(input);
  KerasTensor joined = layers::Concatenate()({a, b, a});
  EXPECT_EQ(joined.shape(), (Shape{7, 4, 4}));
  EXPECT_EQ(layers::Concatenate(-1)({a, a}).shape(), (Shape{2, 4, 8}));
  EXPECT_EQ(layers::Concatenate(1)({a, a}).shape(), (Shape{2, 8, 4}));

  Functional model(input, joined);
  auto x = torch::randn({3, 2, 4, 4});
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  auto conv = torch::conv2d(x, params["conv2d.weight"], params["conv2d.bias"]);
  EXPECT_TRUE(torch::allclose(model->forward(x), torch::cat({x.relu(), conv, x.relu()}, 1)));

  KerasTensor small = Input({2, 3, 4});
  const std::string error = testing::message_of<InvalidArgument>([&] {
    layers::Concatenate().named("skip")({input, small});
  });
  EXPECT_CONTAINS(error, "Concatenate layer 'skip'");
  EXPECT_CONTAINS(error, "(None, 2, 4, 4) and (None, 2, 3, 4)");
  // Joining along height, the same two shapes fit.
  EXPECT_EQ(layers::Concatenate(1)({input, small}).shape(), (Shape{2, 7, 4}));
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>([&] { layers::Concatenate()({input}); }),
                  "two or more inputs");
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>([&] {
                    layers::Concatenate(3)({input, input});
                  }),
                  "axis 3 is outside");
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>([&] {
                    layers::Concatenate()({input, Input({2, 16})});
                  }),
                  "must agree on every other axis");
}

TEST(ImageLayersTest, ZeroPadding2DAddsZerosOnEachSide) {
  auto x = torch::arange(1, 7, torch::kFloat).reshape({1, 1, 2, 3});
  torch::NoGradGuard no_grad;
  auto y = one_layer({1, 2, 3}, layers::ZeroPadding2D(1))->forward(x);
  EXPECT_TRUE(torch::equal(y, floats({0.0f, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0,  //
                                      0,    0, 0, 0, 0},
                                     {1, 1, 4, 5})));
  // ((top, bottom), (left, right)) = ((0, 2), (1, 0)).
  auto layer = layers::ZeroPadding2D({{0, 2}, {1, 0}});
  KerasTensor input = Input({1, 2, 3});
  EXPECT_EQ(layer(input).shape(), (Shape{1, 4, 4}));
  auto z = Functional(input, layer(input))->forward(x);
  EXPECT_TRUE(
      torch::equal(z, floats({0.0f, 1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 4, 4})));
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>([] { layers::ZeroPadding2D(-1); }),
                  "at least 0");
  EXPECT_CONTAINS(testing::message_of<InvalidArgument>(
                      [] { layers::ZeroPadding2D(2).named("pad")(Input({5})); }),
                  "ZeroPadding2D layer 'pad' expects one example");
}

TEST(ImageLayersTest, NewLayersHaveKerasDefaultNames) {
  KerasTensor input = Input({2, 4, 4});
  KerasTensor x = layers::ZeroPadding2D(1)(input);
  x = layers::Conv2D(2, 3)(x);
  x = layers::Conv2DTranspose(2, 1)(x);
  x = layers::InstanceNormalization()(x);
  x = layers::LeakyReLU()(x);
  x = layers::Concatenate()({x, input});
  x = layers::Dropout(0.1)(x);
  Model model(input, layers::Activation("tanh")(x), "names");
  std::ostringstream out;
  model.summary(out);
  for (const char* row :
       {"zero_padding2d (ZeroPadding2D)", "conv2d_transpose (Conv2DTranspose)",
        "instance_normalization (InstanceNormalization)", "leaky_re_lu (LeakyReLU)",
        "concatenate (Concatenate)", "dropout (Dropout)", "activation (Activation)"})
    EXPECT_CONTAINS(out.str(), row);
}

TEST(ImageLayersTest, SmallUNetRunsForwardAndBackward) {
  using namespace layers;  // NOLINT
  torch::manual_seed(6);
  KerasTensor input = Input({1, 32, 32});
  auto down = [](const KerasTensor& x, int64_t filters, bool normalize) {
    KerasTensor y = Conv2D(filters, 4).strides(2).padding("same").use_bias(false)(x);
    if (normalize) y = InstanceNormalization()(y);
    return LeakyReLU(0.2)(y);
  };
  auto up = [](const KerasTensor& x, int64_t filters, double dropout) {
    KerasTensor y = Conv2DTranspose(filters, 4).strides(2).padding("same").use_bias(false)(x);
    y = InstanceNormalization()(y);
    if (dropout > 0) y = Dropout(dropout).seed(7)(y);
    return ReLU()(y);
  };
  KerasTensor d1 = down(input, 8, false);                 // 8 x 16 x 16
  KerasTensor d2 = down(d1, 16, true);                    // 16 x 8 x 8
  KerasTensor d3 = down(d2, 32, true);                    // 32 x 4 x 4
  KerasTensor u1 = Concatenate()({up(d3, 16, 0.5), d2});  // 32 x 8 x 8
  KerasTensor u2 = Concatenate()({up(u1, 8, 0.0), d1});   // 16 x 16 x 16
  KerasTensor image = Activation("tanh")(Conv2DTranspose(1, 4).strides(2).padding("same")(u2));
  // A PatchGAN-like head on the result: pad, then an unpadded convolution to logits.
  KerasTensor patches = Conv2D(1, 4)(ZeroPadding2D(1)(down(image, 4, true)));
  EXPECT_EQ(u1.shape(), (Shape{32, 8, 8}));
  EXPECT_EQ(u2.shape(), (Shape{16, 16, 16}));
  EXPECT_EQ(image.shape(), (Shape{1, 32, 32}));
  EXPECT_EQ(patches.shape(), (Shape{1, 15, 15}));
  Model generator(input, image, "unet");
  Model both(input, patches, "unet_patchgan");

  int64_t parameters = 0;
  for (const auto& p : generator.module()->parameters()) parameters += p.numel();
  EXPECT_EQ(generator.count_params(), parameters);
  std::ostringstream out;
  generator.summary(out);
  EXPECT_CONTAINS(out.str(), "[re_lu, leaky_re_lu_1]");

  auto module = both.module()->as<FunctionalImpl>();
  ASSERT_NE(module, nullptr);
  module->train();
  auto x = torch::rand({4, 1, 32, 32}) * 2 - 1;
  auto logits = module->forward(x);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 1, 15, 15}));
  logits.pow(2).mean().backward();
  for (const auto& p : module->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
  auto y = generator(x);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 1, 32, 32}));
  EXPECT_LE(y.abs().max().item<double>(), 1.0);
}

}  // namespace
}  // namespace dist::keras
