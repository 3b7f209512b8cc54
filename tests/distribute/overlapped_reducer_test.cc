// Gradient reduction overlapped with backward (OverlappedReducer), in one process: a
// one-worker MultiWorkerMirroredStrategy with 2 local replicas goes through the same hooks,
// packs and communication thread as a real job; the multi-process bit-identity test is in
// multi_worker_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/distribute/local_cluster.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/train/loss.h"
#include "distribute/reduction/overlapped_reducer.h"
#include "distribute/strategies/mirrored_extended.h"

namespace dist {
namespace {

MultiWorkerMirroredStrategy one_worker_strategy(bool overlap) {
  MultiWorkerOptions options;
  options.cluster = parse_tf_config(local_tf_config(free_loopback_ports(1), 0));
  options.replicas_per_worker = 2;
  options.threads_per_replica = 1;
  options.communication.timeout = std::chrono::seconds(20);
  options.communication.bytes_per_pack = 64;  // one or two tensors per pack
  options.communication.overlap_with_backward = overlap;
  return MultiWorkerMirroredStrategy(options);
}

// Trains a small MLP whose second layer replica 1 never uses on odd steps (its gradients there
// never come), with one step that runs backward without apply_gradients. Returns the weights.
std::vector<torch::Tensor> train_irregular_steps(bool overlap) {
  auto strategy = one_worker_strategy(overlap);
  torch::manual_seed(3);
  auto model = strategy.mirror(torch::nn::Sequential(
      torch::nn::Linear(6, 5), torch::nn::Functional(torch::relu), torch::nn::Linear(5, 3)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 6; ++step) {
    auto x = torch::randn({8, 6});
    auto y = torch::randint(0, 3, {8});
    const bool apply = step != 2;
    strategy.run([&] {
      auto* ctx = get_replica_context();
      const int64_t r = ctx->replica_id_in_sync_group();
      auto xs = x.narrow(0, r * 4, 4);
      torch::Tensor loss;
      if (r == 1 && step % 2 == 1) {
        loss = model->ptr(0)->as<torch::nn::Linear>()->forward(xs).sum() * 0.01;  // skips layer 2
      } else {
        loss = torch::nn::functional::cross_entropy(model->forward(xs), y.narrow(0, r * 4, 4));
      }
      loss.backward();
      // A collective between backward and apply_gradients: it must follow the step's packs.
      ctx->all_reduce(ReduceOp::kSum, loss.detach());
      if (apply) optimizer->apply_gradients();
    });
  }
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.primary()->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

TEST(OverlappedReducerTest, UnusedParametersAndAStepWithoutApplyMatchReducingAfterBackward) {
  auto overlapped = train_irregular_steps(true);
  auto after_backward = train_irregular_steps(false);
  ASSERT_EQ(overlapped.size(), after_backward.size());
  for (size_t i = 0; i < overlapped.size(); ++i)
    EXPECT_TRUE(torch::equal(overlapped[i], after_backward[i])) << "parameter " << i;
}

// The point of overlap: with every gradient used, every pack is complete (and its all-reduce
// started) in a gradient hook, before backward() returns.
TEST(OverlappedReducerTest, PacksStartDuringBackward) {
  auto strategy = one_worker_strategy(true);
  auto model = strategy.mirror(torch::nn::Sequential(
      torch::nn::Linear(6, 5), torch::nn::Functional(torch::relu), torch::nn::Linear(5, 3)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  auto& reducer = *static_cast<OverlappedReducer*>(
      &static_cast<MirroredVariables&>(model.variables()).reducer());
  ASSERT_EQ(reducer.num_packs(), 4u);  // 64-byte packs: one tensor each
  for (int step = 0; step < 3; ++step) {
    strategy.run([&] {
      model->forward(torch::ones({2, 6})).sum().backward();
      optimizer->apply_gradients();
    });
    EXPECT_EQ(reducer.packs_ready_in_backward(), 4u);
  }
}

TEST(OverlappedReducerTest, BackwardTwiceInOneStepIsAClearErrorNamingTheParameter) {
  auto strategy = one_worker_strategy(true);
  auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(4, 2)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  try {
    strategy.run([&] {
      auto loss = model->forward(torch::ones({2, 4})).sum();
      loss.backward({}, /*retain_graph=*/true);
      loss.backward();
      optimizer->apply_gradients();
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("accumulated twice"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("overlap_with_backward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'0."), std::string::npos) << e.what();
  }
  // The strategy stays usable: a normal step works afterwards.
  strategy.run([&] {
    model->forward(torch::ones({2, 4})).sum().backward();
    optimizer->apply_gradients();
  });
}

}  // namespace
}  // namespace dist
