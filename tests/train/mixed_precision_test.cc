// Mixed precision policies: bfloat16 compute with float32 variables, per thread, under the
// strategies and in Model::fit.
#include "dist/train/mixed_precision.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/keras/model.h"
#include "dist/models/keras_models.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "equivalence_data.h"

namespace dist {
namespace {

using mixed_precision::AutocastScope;
using mixed_precision::Policy;

TEST(MixedPrecisionTest, PolicyNamesAsKerasAndShortOnes) {
  EXPECT_EQ(mixed_precision::policy_from_name("mixed_bfloat16"), Policy::kMixedBFloat16);
  EXPECT_EQ(mixed_precision::policy_from_name("bf16"), Policy::kMixedBFloat16);
  EXPECT_EQ(mixed_precision::policy_from_name("float32"), Policy::kFloat32);
  EXPECT_EQ(mixed_precision::policy_from_name("fp16"), Policy::kMixedFloat16);
  EXPECT_EQ(mixed_precision::policy_name(Policy::kMixedBFloat16), "mixed_bfloat16");
  try {
    mixed_precision::policy_from_name("half");
    FAIL() << "accepted 'half'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mixed precision policy 'half'"),
              std::string::npos);
  }
}

TEST(MixedPrecisionTest, Float16IsRefusedOnCpuWithTheAlternative) {
  try {
    AutocastScope scope(Policy::kMixedFloat16);
    FAIL() << "a float16 scope opened on a CPU-only build";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("use mixed_bfloat16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mixed_precision::set_global_policy(Policy::kMixedFloat16), InvalidArgument);
  EXPECT_EQ(mixed_precision::global_policy(), Policy::kFloat32);
}

TEST(MixedPrecisionTest, ScopeComputesMatrixProductsInBFloat16AndRestores) {
  torch::nn::Linear layer(8, 4);
  auto x = torch::randn({3, 8});
  {
    AutocastScope scope(Policy::kMixedBFloat16);
    EXPECT_EQ(layer->forward(x).scalar_type(), torch::kBFloat16);
    {
      AutocastScope inner(Policy::kFloat32);  // changes nothing
      EXPECT_EQ(layer->forward(x).scalar_type(), torch::kBFloat16);
    }
    {
      AutocastScope nested(Policy::kMixedBFloat16);
      EXPECT_EQ(layer->forward(x).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(layer->forward(x).scalar_type(), torch::kBFloat16) << "a nested scope's end";
  }
  EXPECT_EQ(layer->forward(x).scalar_type(), torch::kFloat);
  EXPECT_EQ(layer->weight.scalar_type(), torch::kFloat);
}

TEST(MixedPrecisionTest, ForwardInPolicyGivesFloat32OutputsAndFloat32Gradients) {
  torch::manual_seed(3);
  auto model = models::make_tutorial_cnn();
  auto batch = *testing::equivalence_data().iterator().next();
  SparseCategoricalCrossentropy loss_fn(true);
  auto gradients = [&](Policy policy) {
    model->zero_grad();
    auto logits =
        mixed_precision::forward_in_policy([&] { return model->forward(batch[0]); }, policy);
    EXPECT_EQ(logits.scalar_type(), torch::kFloat);
    loss_fn(batch[1], logits).backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  auto float32 = gradients(Policy::kFloat32);
  auto bf16 = gradients(Policy::kMixedBFloat16);
  bool differs = false;
  for (size_t i = 0; i < float32.size(); ++i) {
    EXPECT_EQ(bf16[i].scalar_type(), torch::kFloat);
    differs = differs || !torch::equal(float32[i], bf16[i]);
    // bfloat16 keeps 8 bits of mantissa; through four layers the gradients still agree to
    // within 15% in norm (measured: at most 8%), while a wrong gradient is off by ~100%.
    const double relative =
        (float32[i] - bf16[i]).norm().item<double>() / float32[i].norm().item<double>();
    EXPECT_LT(relative, 0.15) << "parameter " << i;
    EXPECT_GT(relative, 0) << "parameter " << i;
  }
  EXPECT_TRUE(differs) << "bfloat16 gradients equal float32's: autocast did not run";
}

// Autocast is per thread: the scope opened inside run() applies on every replica's thread.
TEST(MixedPrecisionTest, EachReplicaThreadComputesInBFloat16InsideRun) {
  MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.threads_per_replica = 1;
  MirroredStrategy strategy(options);
  torch::nn::Linear layer(8, 4);
  auto types = strategy.run([&] {
    return mixed_precision::forward_in_policy(
               [&] {
                 EXPECT_EQ(layer->forward(torch::ones({2, 8})).scalar_type(), torch::kBFloat16);
                 return layer->forward(torch::ones({2, 8}));
               },
               Policy::kMixedBFloat16)
        .scalar_type();
  });
  for (auto type : types.values()) EXPECT_EQ(type, torch::kFloat);
}

TEST(MixedPrecisionTest, FitUsesTheGlobalPolicy) {
  auto train = [](Policy policy) {
    mixed_precision::set_global_policy(policy);
    torch::manual_seed(11);
    keras::Model model = models::make_keras_model("cnn");
    OneDeviceStrategy strategy("cpu:0");
    model.compile(strategy, keras::optimizers::Adam(1e-3), SparseCategoricalCrossentropy(true),
                  {"accuracy"});
    keras::FitOptions options;
    options.verbose = 0;
    auto history = model.fit(testing::equivalence_data(), options);
    auto prediction = model(testing::equivalence_data().iterator().next()->at(0));
    mixed_precision::set_global_policy(Policy::kFloat32);
    EXPECT_EQ(prediction.scalar_type(), torch::kFloat);
    return history.history.at("loss").at(0);
  };
  const double float32 = train(Policy::kFloat32);
  const double bf16 = train(Policy::kMixedBFloat16);
  EXPECT_NE(float32, bf16) << "the bf16 run computed exactly as float32: the policy was unused";
  EXPECT_NEAR(float32, bf16, 0.05 * float32);
}

}  // namespace
}  // namespace dist
