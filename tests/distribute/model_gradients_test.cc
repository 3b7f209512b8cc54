// dist::backward(loss, model): the gradients of one model only.
#include "dist/distribute/model_gradients.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"

namespace dist {
namespace {

torch::nn::Sequential two_layers(int64_t in, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, 5), torch::nn::Tanh(),
                               torch::nn::Linear(5, out));
}

TEST(ModelGradientsTest, OnlyTheNamedModelGetsGradientsAndTheyAreAutogradsOwn) {
  OneDeviceStrategy strategy("cpu:0");
  torch::manual_seed(3);
  auto generator = strategy.mirror(two_layers(4, 3));
  auto discriminator = strategy.mirror(two_layers(3, 1));
  auto x = torch::randn({6, 4});
  auto loss = discriminator->forward(generator->forward(x)).pow(2).mean();

  auto params = generator.primary()->parameters();
  auto expected = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/true);
  backward(loss, generator);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(torch::equal(params[i].grad(), expected[i]));
  for (const auto& p : discriminator.primary()->parameters())
    EXPECT_FALSE(p.grad().defined()) << "the discriminator's gradient was touched";

  // The graph is kept: the discriminator's gradient of the same loss comes next.
  backward(loss, discriminator);
  for (const auto& p : discriminator.primary()->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(ModelGradientsTest, EachReplicaAccumulatesIntoItsOwnCopy) {
  MirroredStrategy strategy(std::vector<std::string>{"cpu:0", "cpu:1"});
  torch::manual_seed(5);
  auto generator = strategy.mirror(two_layers(4, 3));
  auto discriminator = strategy.mirror(two_layers(3, 1));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(generator, torch::optim::SGDOptions(0.5));
  auto before = generator.primary()->parameters()[0].detach().clone();
  auto x = torch::randn({4, 4});
  // Replica r's loss is r + 1 times replica 0's, so the summed gradient is 3x replica 0's
  // alone: both copies' gradients were reduced, and only the generator's.
  torch::Tensor g0;
  strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    auto loss = (r + 1) * discriminator->forward(generator->forward(x)).sum();
    backward(loss, generator);
    if (r == 0) g0 = generator->parameters()[0].grad().clone();
    for (const auto& p : discriminator->parameters()) EXPECT_FALSE(p.grad().defined());
    optimizer->apply_gradients();
  });
  auto after = generator.primary()->parameters()[0].detach();
  EXPECT_TRUE(torch::allclose(after, before - 0.5 * 3 * g0, 1e-5, 1e-6));
}

TEST(ModelGradientsTest, BadLossesAreRefusedByName) {
  OneDeviceStrategy strategy("cpu:0");
  auto model = strategy.mirror(two_layers(4, 3));
  auto out = model->forward(torch::randn({2, 4}));
  try {
    backward(out, model);
    FAIL() << "a non-scalar loss was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("must be a scalar"), std::string::npos) << e.what();
  }
  try {
    backward(out.sum().detach(), model);
    FAIL() << "a loss without a graph was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("does not require gradients"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dist
