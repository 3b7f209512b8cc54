// SyncBatchNorm and convert_sync_batchnorm (dist/distribute/sync_batch_norm.h) in a custom
// loop over LibTorch modules: N replicas give one device's forward outputs, first-step
// gradients, weights after 20 SGD steps and moving statistics, with gradient reduction inline
// and overlapped with backward; per-replica BatchNorm does not. The 2 workers x 2 replicas
// case is MultiWorkerTest.SyncBatchNormModulesOnTwoWorkersOfTwoReplicasTrainAsOneDevice.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/sync_batch_norm.h"
#include "distribute/local_cluster.h"
#include "equivalence_data.h"

namespace dist {
namespace {

// The largest relative difference of `a` from `b` (same names in the same order), and its name.
std::pair<double, std::string> worst(const std::vector<std::pair<std::string, torch::Tensor>>& a,
                                     const std::vector<std::pair<std::string, torch::Tensor>>& b) {
  EXPECT_EQ(a.size(), b.size());
  std::pair<double, std::string> result{0.0, ""};
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const double d = testing::max_relative_difference({a[i].second}, {b[i].second});
    if (d > result.first) result = {d, a[i].first};
  }
  return result;
}

// One worker of two replicas whose gradient packs are all-reduced during backward.
MultiWorkerMirroredStrategy overlapped_one_worker() {
  MultiWorkerOptions options;
  options.cluster = parse_tf_config(local_tf_config(free_loopback_ports(1), 0));
  options.replicas_per_worker = 2;
  options.threads_per_replica = 1;
  options.communication.timeout = std::chrono::seconds(20);
  options.communication.bytes_per_pack = 64;
  options.communication.overlap_with_backward = true;
  return MultiWorkerMirroredStrategy(options);
}

MirroredStrategy replicas(int n) {
  std::vector<std::string> devices;
  for (int r = 0; r < n; ++r) devices.push_back("cpu:" + std::to_string(r));
  return MirroredStrategy(devices);
}

// equivalence_data's batches of 10 split 5+5, 4+3+3 and 3+3+2+2; its last batch of 3 leaves
// the fourth of 4 replicas empty.
TEST(SyncBatchNormModuleTest, ReplicasTrainAsOneDeviceInlineAndOverlapped) {
  const auto one = testing::train_batch_norm_steps(OneDeviceStrategy());
  const std::vector<std::pair<std::string, Strategy>> strategies = {
      {"mirrored x2", replicas(2)},
      {"mirrored x3", replicas(3)},
      {"mirrored x4", replicas(4)},
      {"1 worker x 2, overlapped", overlapped_one_worker()}};
  for (const auto& [name, strategy] : strategies) {
    const auto [d, what] = worst(testing::train_batch_norm_steps(strategy), one);
    std::printf("%s: max relative difference %.3g (%s)\n", name.c_str(), d, what.c_str());
    EXPECT_LT(d, 1e-5) << name << ": " << what;
  }
  // Per-replica statistics: the outputs, gradients and weights differ, and the test sees it.
  // (19 steps: the last batch would leave one replica a single example, which LibTorch's
  // BatchNorm1d refuses in training.)
  const auto [apart, what] = worst(testing::train_batch_norm_steps(replicas(2), false, 19),
                                   testing::train_batch_norm_steps(OneDeviceStrategy(), true, 19));
  std::printf("mirrored x2, per-replica BatchNorm: max relative difference %.3g (%s)\n", apart,
              what.c_str());
  EXPECT_GT(apart, 1e-2);
}

TEST(SyncBatchNormModuleTest, ConvertKeepsStateAndSharesTheOtherModules) {
  torch::manual_seed(1);
  torch::nn::Sequential net(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                            torch::nn::Conv2d(2, 2, 1),
                            torch::nn::BatchNorm2d(torch::nn::BatchNormOptions(2).eps(0.1)));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.uniform_(-1, 1);
    for (auto& b : net->buffers())
      if (b.is_floating_point()) b.uniform_(0.5, 2);
  }
  net->eval();
  auto converted = convert_sync_batchnorm(net);
  EXPECT_EQ(converted->size(), 4u);
  EXPECT_EQ(converted[0].get(), net[0].get());  // shared
  EXPECT_EQ(converted[2].get(), net[2].get());
  auto bn = converted->ptr<SyncBatchNormImpl>(3);
  ASSERT_NE(bn, nullptr);
  EXPECT_DOUBLE_EQ(bn->options.eps(), 0.1);
  EXPECT_FALSE(bn->is_training());
  // The same names and values: a checkpoint of one loads into the other.
  const auto original = net->named_parameters();
  for (const auto& p : converted->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), original[p.key()])) << p.key();
  const auto buffers = net->named_buffers();
  EXPECT_EQ(converted->named_buffers().size(), buffers.size());
  for (const auto& b : converted->named_buffers())
    EXPECT_TRUE(torch::equal(b.value(), buffers[b.key()])) << b.key();
  // A copy, not the same tensors: training one leaves the other alone.
  EXPECT_NE(bn->weight.data_ptr(), original["3.weight"].data_ptr());
  // Outside a step, in eval mode: LibTorch's BatchNorm exactly.
  auto x = torch::randn({5, 2, 3, 3});
  EXPECT_TRUE(torch::allclose(converted[3]->as<SyncBatchNormImpl>()->forward(x),
                              net[3]->as<torch::nn::BatchNorm2dImpl>()->forward(x)));
}

TEST(SyncBatchNormModuleTest, OutsideAStepItTrainsAsLibTorchsBatchNorm) {
  torch::manual_seed(2);
  torch::nn::BatchNorm2d reference(torch::nn::BatchNormOptions(3).momentum(0.2));
  SyncBatchNorm synced(torch::nn::BatchNormOptions(3).momentum(0.2));
  auto x = torch::randn({4, 3, 5, 5}) * 2 + 1;
  EXPECT_TRUE(torch::allclose(synced(x), reference(x), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(synced->running_mean, reference->running_mean));
  EXPECT_TRUE(torch::allclose(synced->running_var, reference->running_var));
  EXPECT_EQ(synced->num_batches_tracked.item<int64_t>(), 1);
  // No momentum: the cumulative average, as LibTorch's.
  torch::nn::BatchNorm1d cumulative(torch::nn::BatchNormOptions(3).momentum(c10::nullopt));
  SyncBatchNorm synced_cumulative(torch::nn::BatchNormOptions(3).momentum(c10::nullopt));
  for (int i = 0; i < 3; ++i) {
    auto y = torch::randn({6, 3}) + i;
    cumulative(y);
    synced_cumulative(y);
  }
  EXPECT_TRUE(torch::allclose(synced_cumulative->running_mean, cumulative->running_mean));
}

TEST(SyncBatchNormModuleTest, BadInputsAreRefusedByName) {
  SyncBatchNorm bn(4);
  try {
    bn(torch::randn({2, 3, 5}));
    ADD_FAILURE() << "3 channels accepted by a SyncBatchNorm of 4";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("SyncBatchNorm of 4 features got an input of 3"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bn(torch::randn({4})), InvalidArgument);
  EXPECT_THROW(SyncBatchNorm(0), InvalidArgument);
  // One value per channel in the global batch: refused as one device's BatchNorm refuses it.
  auto messages = replicas(2).run([&] {
    SyncBatchNorm local(2);
    try {
      const int r = get_replica_context()->replica_id_in_sync_group();
      local(torch::randn({r == 0 ? 1 : 0, 2}));
      return std::string("accepted");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  for (const auto& m : messages.values())
    EXPECT_NE(m.find("value(s) per channel in the global batch"), std::string::npos) << m;
}

}  // namespace
}  // namespace dist
