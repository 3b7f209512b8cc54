// The CycleGAN of examples/cyclegan.cc: shapes, and N replicas equal to one device.
#include "dist/models/cyclegan.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "equivalence_data.h"

namespace dist::models {
namespace {

// One flat vector per model ("generator_g.*", ...) and one per loss: the relative difference
// of a whole model, as the other equivalence tests measure a whole model's weights, so a
// near-zero bias does not stand for the model.
std::vector<torch::Tensor> values(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::map<std::string, std::vector<torch::Tensor>> groups;
  for (const auto& [name, t] : named)
    groups[name.rfind("loss/", 0) == 0 ? name : name.substr(0, name.find('.'))].push_back(
        t.flatten());
  std::vector<torch::Tensor> out;
  for (const auto& [group, tensors] : groups) out.push_back(torch::cat(tensors));
  return out;
}

TEST(CycleGanTest, GeneratorsKeepTheImageShapeAndDiscriminatorsGiveAPatchGrid) {
  for (int64_t size : {16, 32}) {
    CycleGanOptions options;
    options.image_size = size;
    options.generator_filters = 4;
    options.discriminator_filters = 4;
    auto g = unet_generator(options);
    auto d = patch_discriminator(options);
    auto x = torch::rand({3, 1, size, size}) * 2 - 1;
    auto fake = g->forward(x);
    EXPECT_EQ(fake.sizes(), x.sizes());
    EXPECT_LE(fake.abs().max().item<double>(), 1.0);  // tanh
    const int64_t patches = size / 4 - 2;
    EXPECT_EQ(d->forward(fake).sizes(), (std::vector<int64_t>{3, 1, patches, patches}));
  }
}

TEST(CycleGanTest, BadOptionsAndBatchesAreRefusedByName) {
  CycleGanOptions options;
  options.image_size = 28;
  EXPECT_THROW(unet_generator(options), InvalidArgument);
  options.image_size = 16;
  options.optimizer = "lbfgs";
  try {
    CycleGan gan(OneDeviceStrategy("cpu:0"), options);
    FAIL() << "an unknown optimizer was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lbfgs"), std::string::npos) << e.what();
  }
  options.optimizer = "sgd";
  options.generator_filters = 2;
  options.discriminator_filters = 2;
  CycleGan gan(OneDeviceStrategy("cpu:0"), options);
  try {
    gan.train_step(torch::zeros({2, 1, 28, 28}), torch::zeros({2, 1, 16, 16}));
    FAIL() << "28x28 images were accepted by a 16x16 CycleGAN";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("x must be a batch [n, 1, 16, 16]"), std::string::npos)
        << e.what();
  }
}

struct Case {
  int replicas;
  bool adam;
  double tolerance;
};

class CycleGanEquivalenceTest : public ::testing::TestWithParam<Case> {};

// Four models, four optimizers, each model's gradient from its own loss: N replicas of the
// global batches equal one device within float summation-order tolerance, losses included.
TEST_P(CycleGanEquivalenceTest, ReplicasTrainLikeOneDevice) {
  const Case c = GetParam();
  auto expected = testing::train_cyclegan_steps(OneDeviceStrategy("cpu:0"), c.adam);
  std::vector<std::string> devices;
  for (int r = 0; r < c.replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
  auto actual = testing::train_cyclegan_steps(MirroredStrategy(devices), c.adam);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) ASSERT_EQ(actual[i].first, expected[i].first);
  EXPECT_EQ(expected.back().first, "loss/loss_Y/loss");
  const double difference = testing::max_relative_difference(values(actual), values(expected));
  EXPECT_LT(difference, c.tolerance);
  // It trained: the weights moved away from a fresh start of the same seed.
  auto untrained = testing::train_cyclegan_steps(OneDeviceStrategy("cpu:0"), c.adam, 0);
  std::vector<torch::Tensor> start, end;
  for (size_t i = 0; i < untrained.size(); ++i) {
    start.push_back(untrained[i].second);
    end.push_back(expected[i].second);
  }
  EXPECT_GT(testing::max_relative_difference(end, start), 100 * c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(Replicas, CycleGanEquivalenceTest,
                         ::testing::Values(Case{2, true, 1e-4}, Case{3, true, 1e-4},
                                           Case{2, false, 1e-5}, Case{3, false, 1e-5}),
                         [](const auto& info) {
                           return std::to_string(info.param.replicas) + "Replicas" +
                                  (info.param.adam ? "Adam" : "Sgd");
                         });

}  // namespace
}  // namespace dist::models
