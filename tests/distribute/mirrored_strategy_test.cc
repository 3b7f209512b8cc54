// MirroredStrategy and CentralStorageStrategy: the core equivalence test of the project and
// the replica-context semantics.
#include "dist/distribute/mirrored_strategy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "dist/distribute/batch_split.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"
#include "equivalence_data.h"

namespace dist {
namespace {

using data::Dataset;
using data::Element;

MirroredOptions options_for(int replicas, CrossDeviceOps ops = CrossDeviceOps::kParallelAllReduce) {
  MirroredOptions options;
  for (int r = 0; r < replicas; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.cross_device_ops = ops;
  options.threads_per_replica = 1;
  return options;
}

using testing::equivalence_data;
using testing::max_relative_difference;

enum class Opt { kSgd, kAdam };

std::vector<torch::Tensor> train_20_steps(const Strategy& strategy, Opt which,
                                          bool from_function = false) {
  torch::manual_seed(7);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  std::shared_ptr<MirroredOptimizer> optimizer =
      which == Opt::kSgd
          ? strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1))
          : strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  auto step = [&](const Element& b) {
    auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
    loss.backward();
    optimizer->apply_gradients();
    return loss.detach();
  };
  int steps = 0;
  if (from_function) {
    // Per-replica pipelines: batch 10 split by hand into per-replica batches in order, so
    // the replicas see exactly what the split of the global batch gives them.
    const int replicas = strategy.num_replicas_in_sync();
    auto ds = strategy.distribute_datasets_from_function([&](const InputContext& ctx) {
      EXPECT_EQ(ctx.num_replicas_in_sync, replicas);
      std::vector<torch::Tensor> xs, ys;
      for (const auto& batch : equivalence_data().iterator()) {
        auto shares = split_batch(batch, replicas);
        for (const auto& share : shares) {
          xs.push_back(share[0]);
          ys.push_back(share[1]);
        }
      }
      // Elements are whole per-replica batches: wrap each in a dataset of one element.
      Dataset all = Dataset::from_tensor_slices({torch::arange(static_cast<int64_t>(xs.size()))})
                        .map([xs, ys](Element e) {
                          auto i = e[0].item<int64_t>();
                          return Element{xs[static_cast<size_t>(i)], ys[static_cast<size_t>(i)]};
                        });
      return all;
    });
    for (const auto& batch : ds.iterator()) {
      strategy.run(step, batch);
      ++steps;
    }
  } else {
    for (const auto& batch :
         strategy.experimental_distribute_dataset(equivalence_data()).iterator()) {
      strategy.run(step, batch);
      ++steps;
    }
  }
  EXPECT_EQ(steps, 20);
  std::vector<torch::Tensor> weights;
  for (const auto& p : model.primary()->parameters()) weights.push_back(p.detach().clone());
  // Every copy holds the same values (semantic 5).
  for (const auto& copy : model.replicas()) {
    auto params = copy->parameters();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], weights[i]));
  }
  return weights;
}

struct EquivalenceCase {
  int replicas;
  Opt optimizer;
  CrossDeviceOps ops;
};

class MirroredEquivalenceTest : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(MirroredEquivalenceTest, NReplicasEqualOneDevice) {
  const auto& c = GetParam();
  auto expected = train_20_steps(OneDeviceStrategy(), c.optimizer);
  auto actual = train_20_steps(MirroredStrategy(options_for(c.replicas, c.ops)), c.optimizer);
  const double tolerance = c.optimizer == Opt::kSgd ? 1e-5 : 1e-4;
  double diff = max_relative_difference(actual, expected);
  EXPECT_LT(diff, tolerance) << c.replicas << " replicas";
  RecordProperty("max_relative_difference", std::to_string(diff));
  std::printf("max relative difference: %.3g\n", diff);
  // And the run really trained: the weights moved.
  torch::manual_seed(7);
  auto initial = models::make_tutorial_cnn()->parameters();
  EXPECT_GT(
      max_relative_difference(expected, std::vector<torch::Tensor>(initial.begin(), initial.end())),
      1e-3);
}

std::string case_name(const ::testing::TestParamInfo<EquivalenceCase>& info) {
  return std::to_string(info.param.replicas) + "Replicas" +
         (info.param.optimizer == Opt::kSgd ? "Sgd" : "Adam") + "_" + to_string(info.param.ops);
}

INSTANTIATE_TEST_SUITE_P(
    MirroredReplicas, MirroredEquivalenceTest,
    ::testing::Values(EquivalenceCase{1, Opt::kSgd, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{2, Opt::kSgd, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{3, Opt::kSgd, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{4, Opt::kSgd, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{1, Opt::kAdam, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{2, Opt::kAdam, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{3, Opt::kAdam, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{4, Opt::kAdam, CrossDeviceOps::kParallelAllReduce},
                      EquivalenceCase{3, Opt::kSgd, CrossDeviceOps::kReductionToOneDevice},
                      EquivalenceCase{4, Opt::kSgd, CrossDeviceOps::kHierarchicalCopy},
                      EquivalenceCase{3, Opt::kAdam, CrossDeviceOps::kHierarchicalCopy}),
    case_name);

TEST(MirroredStrategyTest, CentralStorageAndPerReplicaPipelinesEqualOneDevice) {
  auto expected = train_20_steps(OneDeviceStrategy(), Opt::kSgd);
  auto options = options_for(3);
  CentralStorageStrategy central(options_for(3, CrossDeviceOps::kReductionToOneDevice));
  EXPECT_EQ(central.name(), "central_storage");
  EXPECT_LT(max_relative_difference(train_20_steps(central, Opt::kSgd), expected), 1e-5);
  EXPECT_LT(max_relative_difference(
                train_20_steps(MirroredStrategy(options_for(4)), Opt::kSgd, /*from_function=*/true),
                expected),
            1e-5);
}

// Evaluation in a custom loop calls the primary module, whose forward is not const.
TEST(MirroredStrategyTest, ThePrimaryModuleCanBeCalledAndIsTheSameModule) {
  MirroredStrategy strategy(options_for(2));
  auto model = strategy.mirror(torch::nn::Linear(3, 2));
  const at::Tensor x = torch::ones({4, 3});
  const at::Tensor y = model.primary()->forward(x);
  EXPECT_EQ(y.sizes(), (at::IntArrayRef{4, 2}));
  model.primary()->weight.data().fill_(0.5);
  EXPECT_TRUE(torch::equal(model.primary()->weight, torch::full({2, 3}, 0.5)));
}

TEST(MirroredStrategyTest, DefaultsToOneReplicaPerCore) {
  MirroredStrategy strategy;
  EXPECT_EQ(strategy.num_replicas_in_sync(), available_cores());
  EXPECT_EQ(strategy.name(), "mirrored");
  EXPECT_EQ(
      MirroredStrategy(std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"}).num_replicas_in_sync(),
      3);
  EXPECT_THROW(MirroredStrategy(std::vector<std::string>{"cpu:0", "cpu:0"}), InvalidArgument);
  EXPECT_THROW(MirroredStrategy(std::vector<std::string>{"gpu:0"}), InvalidArgument);
}

TEST(MirroredStrategyTest, RunGivesEachReplicaItsContextAndShare) {
  MirroredStrategy strategy(options_for(3));
  auto batch =
      strategy
          .experimental_distribute_dataset(Dataset::from_tensor_slices({torch::arange(7)}).batch(7))
          .iterator()
          .next()
          .value();
  auto seen = strategy.run(
      [](const Element& b, int offset) {
        auto* ctx = get_replica_context();
        EXPECT_EQ(ctx->num_replicas_in_sync(), 3);
        EXPECT_EQ(ctx->global_batch_size(), 7);
        return ctx->replica_id_in_sync_group() * 100 + b[0].size(0) + offset;
      },
      batch, 1000);
  EXPECT_EQ(seen.values(), (std::vector<int64_t>{1003, 1102, 1202}));  // shares 3, 2, 2
}

// On integer data the exact result is a formula, for every world size.
TEST(MirroredStrategyTest, CollectivesOnIntegerDataAreExact) {
  for (int n = 1; n <= 5; ++n) {
    MirroredStrategy strategy(options_for(n));
    for (auto ops : {CrossDeviceOps::kParallelAllReduce, CrossDeviceOps::kReductionToOneDevice,
                     CrossDeviceOps::kHierarchicalCopy}) {
      MirroredStrategy s(options_for(n, ops));
      for (int64_t count : {0, 1, 7, 1000}) {
        auto results = s.run([count] {
          auto* ctx = get_replica_context();
          const int64_t r = ctx->replica_id_in_sync_group();
          auto values = torch::arange(count, torch::kInt64) * (r + 1);
          auto floats = torch::arange(count, torch::kFloat64) * (r + 1);
          return std::vector<torch::Tensor>{
              ctx->all_reduce(ReduceOp::kSum, values), ctx->all_reduce(ReduceOp::kMax, values),
              ctx->all_reduce(ReduceOp::kMin, values), ctx->all_reduce(ReduceOp::kMean, floats)};
        });
        auto i = torch::arange(count, torch::kInt64);
        for (const auto& r : results.values()) {
          EXPECT_TRUE(torch::equal(r[0], i * (n * (n + 1) / 2))) << n << " " << to_string(ops);
          EXPECT_TRUE(torch::equal(r[1], i * n));
          EXPECT_TRUE(torch::equal(r[2], i));
          EXPECT_TRUE(torch::allclose(r[3], i.to(torch::kFloat64) * ((n + 1) / 2.0)));
        }
      }
    }
    // Cross-replica reduce of per-replica values.
    auto per_replica = strategy.run([] {
      return torch::full({2}, get_replica_context()->replica_id_in_sync_group() + 1, torch::kInt64);
    });
    EXPECT_TRUE(torch::equal(strategy.reduce(ReduceOp::kSum, per_replica),
                             torch::full({2}, n * (n + 1) / 2, torch::kInt64)));
    EXPECT_EQ(strategy.reduce(ReduceOp::kSum, per_replica, 0).item<int64_t>(), n * (n + 1));
    EXPECT_EQ(strategy.reduce(ReduceOp::kMax, per_replica, 0).item<int64_t>(), n);
    EXPECT_EQ(strategy.gather(per_replica, 0).size(0), 2 * n);
  }
}

// tf.distribute's documented example of ReplicaContext.all_reduce on a dictionary.
TEST(MirroredStrategyTest, TensorFlowAllReduceDictionaryExample) {
  MirroredStrategy strategy(options_for(2));
  for (auto op : {ReduceOp::kSum, ReduceOp::kMean}) {
    auto results = strategy.run([op] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      std::map<std::string, torch::Tensor> value{
          {"a", torch::tensor(r == 0 ? 1.0 : 3.0)},
          {"b", r == 0 ? torch::tensor({40.0, 1.0}) : torch::tensor({2.0, 98.0})}};
      return get_replica_context()->all_reduce(op, value);
    });
    for (const auto& r : results.values()) {
      if (op == ReduceOp::kSum) {
        EXPECT_EQ(r.at("a").item<double>(), 4.0);
        EXPECT_TRUE(torch::equal(r.at("b"), torch::tensor({42.0, 99.0})));
      } else {
        EXPECT_EQ(r.at("a").item<double>(), 2.0);
        EXPECT_TRUE(torch::equal(r.at("b"), torch::tensor({21.0, 49.5})));
      }
    }
  }
}

TEST(MirroredStrategyTest, StepsMayReturnDictionariesOfLosses) {
  MirroredStrategy strategy(options_for(2));
  auto losses = strategy.run([] {
    const double r = get_replica_context()->replica_id_in_sync_group();
    return std::map<std::string, torch::Tensor>{{"gen_loss", torch::tensor(r + 1)},
                                                {"disc_loss", torch::tensor(10 * (r + 1))}};
  });
  auto total = strategy.reduce(ReduceOp::kSum, losses);
  EXPECT_EQ(total.at("gen_loss").item<double>(), 3.0);
  EXPECT_EQ(total.at("disc_loss").item<double>(), 30.0);
}

TEST(MirroredStrategyTest, AllGatherAndMergeCall) {
  MirroredStrategy strategy(options_for(3));
  int merged = 0;
  auto gathered = strategy.run([&merged] {
    auto* ctx = get_replica_context();
    const int64_t r = ctx->replica_id_in_sync_group();
    auto mine = torch::full({r + 1, 2}, r, torch::kInt64);  // uneven along axis 0
    auto all = ctx->all_gather(mine, 0);
    ctx->merge_call([&merged] {
      EXPECT_EQ(get_replica_context(), nullptr);  // cross-replica context
      ++merged;
    });
    return all;
  });
  EXPECT_EQ(merged, 1);
  auto expected =
      torch::tensor({0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}, torch::kInt64).reshape({6, 2});
  for (const auto& g : gathered.values()) EXPECT_TRUE(torch::equal(g, expected));
}

TEST(MirroredStrategyTest, LossGuardRejectsAutoReductionWithSeveralReplicas) {
  MirroredStrategy strategy(options_for(2));
  SparseCategoricalCrossentropy auto_loss(true);  // Reduction::kAuto
  try {
    strategy.run([&] { return auto_loss(torch::tensor({1}), torch::rand({1, 10})); });
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("compute_average_loss"), std::string::npos) << e.what();
  }
  // One replica: allowed, as in tf.distribute.
  MirroredStrategy single(options_for(1));
  EXPECT_NO_THROW(single.run([&] { return auto_loss(torch::tensor({1}), torch::rand({1, 10})); }));
}

TEST(MirroredStrategyTest, EmptyReplicaTakesPartAndWeightsMatchOneDevice) {
  // A global batch of 1 across 2 replicas: replica 1 gets zero examples.
  torch::manual_seed(3);
  auto data = Dataset::from_tensor_slices({torch::rand({3, 1, 28, 28}), torch::randint(0, 10, {3})})
                  .batch(1);
  auto train = [&](const Strategy& strategy) {
    torch::manual_seed(5);
    auto model = strategy.mirror(models::make_tutorial_cnn());
    auto opt = strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.5));
    SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
    for (const auto& batch : strategy.experimental_distribute_dataset(data).iterator()) {
      if (strategy.num_replicas_in_sync() == 2) {
        EXPECT_EQ(batch[1][0].size(0), 0);
      }
      strategy.run(
          [&](const Element& b) {
            auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
            loss.backward();
            opt->apply_gradients();
          },
          batch);
    }
    return model.primary()->parameters();
  };
  auto expected = train(OneDeviceStrategy());
  auto actual = train(MirroredStrategy(options_for(2)));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(torch::allclose(actual[i], expected[i], 1e-5, 1e-7)) << i;
}

TEST(MirroredStrategyTest, ExceptionInOneReplicaReachesCallerPromptlyWithoutDeadlock) {
  MirroredStrategy strategy(options_for(3));
  auto model = strategy.mirror(models::make_mlp(8));
  auto opt = strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  const auto start = std::chrono::steady_clock::now();
  try {
    strategy.run([&] {
      auto loss = model->forward(torch::rand({2, 784})).sum();
      loss.backward();
      if (get_replica_context()->replica_id_in_sync_group() == 1)
        throw std::runtime_error("replica 1 ran out of luck");
      opt->apply_gradients();  // replicas 0 and 2 wait here for replica 1
    });
    FAIL() << "expected the replica's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "replica 1 ran out of luck");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // The strategy is usable again.
  opt->zero_grad();
  auto ids = strategy.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  EXPECT_EQ(ids.values(), (std::vector<int>{0, 1, 2}));
}

TEST(MirroredStrategyTest, MismatchedCollectivesFailNamingTheReplica) {
  MirroredStrategy strategy(options_for(2));
  try {
    strategy.run([] {
      auto* ctx = get_replica_context();
      ctx->all_reduce(ReduceOp::kSum, torch::zeros({2 + ctx->replica_id_in_sync_group()}));
    });
    FAIL() << "expected CollectiveError";
  } catch (const CollectiveError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("replica 1"), std::string::npos) << what;
    EXPECT_NE(what.find("[3]"), std::string::npos) << what;
  }
}

TEST(MirroredStrategyTest, MissingCollectiveTimesOutNamingTheReplica) {
  auto options = options_for(2);
  options.collective_timeout = std::chrono::milliseconds(200);
  MirroredStrategy strategy(options);
  const auto start = std::chrono::steady_clock::now();
  try {
    strategy.run([] {
      auto* ctx = get_replica_context();
      if (ctx->replica_id_in_sync_group() == 0)
        ctx->all_reduce(ReduceOp::kSum, torch::ones({1}));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(600));  // never calls it
    });
    FAIL() << "expected CollectiveError";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("replica(s) 1 did not reach all_reduce"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(MirroredStrategyTest, MetricsKeepPerReplicaStateAndAggregate) {
  MirroredStrategy strategy(options_for(3));
  metrics::Mean mean("mean");
  metrics::SparseCategoricalAccuracy accuracy("accuracy");
  strategy.run([&] {
    const int64_t r = get_replica_context()->replica_id_in_sync_group();
    mean.update_state(torch::full({r + 1}, static_cast<double>(r)));  // 0 | 1 1 | 2 2 2
    auto logits = torch::eye(3).index({torch::indexing::Slice(0, r + 1)});
    accuracy.update_state(torch::zeros({r + 1}, torch::kInt64), logits);  // 1 of r+1 right
  });
  EXPECT_EQ(mean.local_states().size(), 3u);
  EXPECT_DOUBLE_EQ(mean.result(), 8.0 / 6.0);
  EXPECT_DOUBLE_EQ(accuracy.result(), 3.0 / 6.0);
}

TEST(MirroredStrategyTest, ModelFromAnotherStrategyIsRejected) {
  OneDeviceStrategy one;
  auto model = one.mirror(models::make_mlp(4));
  MirroredStrategy two(options_for(2));
  EXPECT_THROW(two.run([&] { return model->forward(torch::rand({1, 784})); }), InvalidArgument);
  EXPECT_THROW(two.run([&] { two.run([] {}); }), InvalidArgument);  // nested run
}

}  // namespace
}  // namespace dist

namespace dist {
namespace {

// Copies for replicas are made by clone(), which re-initializes before copying: mirror() puts
// the global generator back, so a second model gets the same initial weights whatever the
// replica count (the CycleGAN's four models rely on it).
TEST(MirroredStrategyTest, MirroringDrawsNothingFromTheGlobalRandomGenerator) {
  torch::manual_seed(9);
  auto alone = models::make_mlp(8);
  const auto expected = torch::rand({4});
  torch::manual_seed(9);
  auto mirrored = MirroredStrategy(std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"})
                      .mirror(models::make_mlp(8));
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

}  // namespace
}  // namespace dist
