#include "dist/distribute/one_device_strategy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/sharding/replica_rows.h"
#include "dist/distribute/batch_split.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"

namespace dist {
namespace {

using data::Dataset;
using data::Element;

TEST(BatchSplitTest, SizesDifferByAtMostOneInOrder) {
  EXPECT_EQ(split_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(split_sizes(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(split_sizes(0, 2), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(split_sizes(64, 1), (std::vector<int64_t>{64}));
  EXPECT_THROW(split_sizes(4, 0), InvalidArgument);
  for (int64_t b = 0; b < 30; ++b) {
    for (int r = 1; r <= 7; ++r) {
      auto sizes = split_sizes(b, r);
      int64_t sum = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        sum += sizes[i];
        if (i > 0) {
          EXPECT_TRUE(sizes[i] == sizes[i - 1] || sizes[i] == sizes[i - 1] - 1);
        }
      }
      EXPECT_EQ(sum, b);
    }
  }
}

// A worker's rows of a global batch (data/sharding/replica_rows.h, read by its row share and its
// replicas' split) are the shares of its replicas, in order, as split_sizes gives them.
TEST(BatchSplitTest, AWorkersRowsAreItsReplicasShares) {
  for (int64_t b = 0; b < 30; ++b) {
    for (int all = 1; all <= 7; ++all) {
      const auto sizes = split_sizes(b, all);
      for (int first = 0; first < all; ++first) {
        for (int count = 1; first + count <= all; ++count) {
          int64_t lo = 0;
          for (int r = 0; r < first; ++r) lo += sizes[static_cast<size_t>(r)];
          int64_t hi = lo;
          for (int r = first; r < first + count; ++r) hi += sizes[static_cast<size_t>(r)];
          const data::detail::ReplicaRows rows{first, count, all};
          EXPECT_EQ(rows.of(b), std::make_pair(lo, hi)) << b << " rows, " << first << "+" << count;
          EXPECT_EQ(rows.replica(count - 1).of(b).second, hi);
        }
      }
    }
  }
}

TEST(BatchSplitTest, SharesAreOrderedViews) {
  Element batch{torch::arange(5), torch::arange(5) * 10};
  auto shares = split_batch(batch, 3);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_TRUE(torch::equal(shares[0][0], torch::tensor({0, 1})));
  EXPECT_TRUE(torch::equal(shares[1][1], torch::tensor({20, 30})));
  EXPECT_TRUE(torch::equal(shares[2][0], torch::tensor({4})));
  EXPECT_TRUE(torch::equal(batch_share(batch, 1, 3)[0], shares[1][0]));
  EXPECT_THROW(split_batch({torch::arange(3), torch::arange(4)}, 2), InvalidArgument);
}

TEST(OneDeviceStrategyTest, RunsOnceWithAReplicaContext) {
  for (Strategy strategy : {get_default_strategy(), Strategy(OneDeviceStrategy("cpu:0"))}) {
    EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
    auto result = strategy.run(
        [](int x) {
          const ReplicaContext* ctx = get_replica_context();
          EXPECT_NE(ctx, nullptr);
          EXPECT_EQ(ctx->replica_id_in_sync_group(), 0);
          EXPECT_EQ(ctx->num_replicas_in_sync(), 1);
          return x * 2;
        },
        21);
    ASSERT_EQ(result.size(), 1);
    EXPECT_EQ(result[0], 42);
    EXPECT_EQ(get_replica_context(), nullptr);  // cross-replica again
  }
  EXPECT_EQ(get_default_strategy().name(), "default");
  EXPECT_EQ(OneDeviceStrategy().name(), "one_device");
  EXPECT_THROW(OneDeviceStrategy("tpu:0"), InvalidArgument);
}

TEST(OneDeviceStrategyTest, ReduceAndDictionaries) {
  OneDeviceStrategy strategy;
  auto values = strategy.run([] { return torch::tensor({1.0, 2.0, 3.0}); });
  EXPECT_TRUE(
      torch::equal(strategy.reduce(ReduceOp::kSum, values), torch::tensor({1.0, 2.0, 3.0})));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, values, 0).item<double>(), 2.0);
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, values, 0).item<double>(), 6.0);
  EXPECT_EQ(strategy.reduce(ReduceOp::kMax, values, 0).item<double>(), 3.0);

  auto dict = strategy.run([] {
    auto* ctx = get_replica_context();
    return ctx->all_reduce(ReduceOp::kSum,
                           std::map<std::string, torch::Tensor>{{"a", torch::tensor(1.0)},
                                                                {"b", torch::tensor({40.0, 1.0})}});
  });
  auto reduced = strategy.reduce(ReduceOp::kSum, dict);
  EXPECT_EQ(reduced.at("a").item<double>(), 1.0);
  EXPECT_TRUE(torch::equal(reduced.at("b"), torch::tensor({40.0, 1.0})));
  EXPECT_EQ(strategy.experimental_local_results(values).size(), 1u);
}

TEST(OneDeviceStrategyTest, DistributedDatasetCarriesTheGlobalBatchSize) {
  OneDeviceStrategy strategy;
  auto ds = strategy.experimental_distribute_dataset(
      Dataset::from_tensor_slices({torch::arange(10)}).batch(4));
  EXPECT_EQ(ds.cardinality(), 3);
  std::vector<int64_t> sizes;
  for (const auto& batch : ds.iterator()) {
    sizes.push_back(batch.global_batch_size());
    auto seen = strategy.run(
        [](const Element& b) { return get_replica_context()->global_batch_size(); }, batch);
    EXPECT_EQ(seen[0], batch.global_batch_size());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
}

TEST(OneDeviceStrategyTest, ExceptionsReachTheCaller) {
  OneDeviceStrategy strategy;
  EXPECT_THROW(strategy.run([] { throw std::runtime_error("boom"); }), std::runtime_error);
  EXPECT_EQ(get_replica_context(), nullptr);
}

// The strategy layer must not change the arithmetic: a loop through OneDeviceStrategy gives
// the weights of the same loop in plain LibTorch (to float rounding: the loss mean is taken
// as sum / n here and inside cross_entropy there).
TEST(OneDeviceStrategyTest, TrainingEqualsPlainLibTorch) {
  torch::manual_seed(0);
  auto x = torch::rand({40, 1, 28, 28});
  auto y = torch::randint(0, 10, {40});
  auto ds = Dataset::from_tensor_slices({x, y}).batch(16);  // 16, 16, 8: a partial batch

  torch::manual_seed(1);
  auto plain = models::make_tutorial_cnn();
  torch::optim::Adam plain_opt(plain->parameters(), torch::optim::AdamOptions(1e-3));
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const auto& b : ds.iterator(epoch)) {
      plain_opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(plain->forward(b[0]), b[1]);
      loss.backward();
      plain_opt.step();
    }
  }

  OneDeviceStrategy strategy;
  torch::manual_seed(1);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto opt = strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  auto dds = strategy.experimental_distribute_dataset(ds);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const auto& batch : dds.iterator(epoch)) {
      strategy.run(
          [&](const Element& b) {
            auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
            loss.backward();
            opt->apply_gradients();
          },
          batch);
    }
  }
  auto expected = plain->parameters();
  auto actual = model.primary()->parameters();
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    // Mean via sum / n versus cross_entropy's mean: equal to float rounding, not bits.
    EXPECT_TRUE(torch::allclose(expected[i], actual[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace dist
