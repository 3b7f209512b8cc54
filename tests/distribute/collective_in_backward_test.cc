// A layer that all-reduces in forward and backward (the rule: backward_collective.h) trains
// the same weights under every strategy as on one device, with gradient reduction inline and
// overlapped with backward. The two-worker case is in tests/multi_worker/multi_worker_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "equivalence_data.h"

namespace dist {
namespace {

std::vector<torch::Tensor> values(const std::vector<std::pair<std::string, torch::Tensor>>& w) {
  std::vector<torch::Tensor> out;
  for (const auto& [name, tensor] : w) out.push_back(tensor);
  return out;
}

TEST(CollectiveInBackwardTest, AllReduceInBackwardEqualsOneDeviceUnderEveryStrategy) {
  const auto one_device = values(testing::train_global_centering_steps(OneDeviceStrategy()));
  const std::vector<std::pair<std::string, Strategy>> strategies = {
      {"mirrored x2", MirroredStrategy(std::vector<std::string>{"cpu:0", "cpu:1"})},
      {"mirrored x3", MirroredStrategy(std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"})},
      {"1 worker x 2, overlapped", testing::overlapped_one_worker()}};
  for (const auto& [name, strategy] : strategies) {
    const auto trained = values(testing::train_global_centering_steps(strategy));
    const double diff = testing::max_relative_difference(trained, one_device);
    std::printf("%s: max relative difference %.3g\n", name.c_str(), diff);
    EXPECT_LT(diff, 1e-5) << name;
  }
}

TEST(CollectiveInBackwardTest, TheGradientOfAnAllReduceIsTheAllReduceOfTheGradients) {
  MirroredStrategy strategy(std::vector<std::string>{"cpu:0", "cpu:1"});
  auto grads = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    auto x = torch::full({2}, 1.0 + r, torch::requires_grad());
    auto sum = get_replica_context()->all_reduce(ReduceOp::kSum, x);
    auto mean = get_replica_context()->all_reduce(ReduceOp::kMean, x);
    EXPECT_TRUE(torch::equal(sum, torch::full({2}, 3.0)));
    // L = sum_r (r + 1) * (sum + mean): dL/dx_r = (1 + 2) * 1 + (1 + 2) / 2.
    ((sum + mean) * (r + 1)).sum().backward();
    return x.grad();
  });
  for (const auto& g : grads.values()) EXPECT_TRUE(torch::equal(g, torch::full({2}, 4.5)));
}

TEST(CollectiveInBackwardTest, AGradientThroughMaxIsRefusedByNameWhenAskedFor) {
  MirroredStrategy strategy(std::vector<std::string>{"cpu:0", "cpu:1"});
  auto messages = strategy.run([] {
    auto x = torch::ones({2}, torch::requires_grad());
    // Reducing is fine (a largest loss to log); only a gradient through it is refused.
    auto largest = get_replica_context()->all_reduce(ReduceOp::kMax, x);
    EXPECT_TRUE(torch::equal(largest.detach(), torch::ones({2})));
    try {
      largest.sum().backward();
      return std::string("backward through MAX was accepted");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  for (const std::string& message : messages.values())
    EXPECT_NE(message.find("all_reduce MAX has no gradient"), std::string::npos) << message;
}

TEST(CollectiveInBackwardTest, ValuesThatNeedAGradientAreReducedDifferentiablyInAVector) {
  MirroredStrategy strategy(std::vector<std::string>{"cpu:0", "cpu:1"});
  auto grads = strategy.run([] {
    auto x = torch::ones({3}, torch::requires_grad());
    auto reduced = get_replica_context()->all_reduce(
        ReduceOp::kSum, std::vector<torch::Tensor>{x, torch::ones({1})});
    reduced[0].sum().backward();
    return x.grad();
  });
  for (const auto& g : grads.values()) EXPECT_TRUE(torch::equal(g, torch::full({3}, 2.0)));
}

}  // namespace
}  // namespace dist
