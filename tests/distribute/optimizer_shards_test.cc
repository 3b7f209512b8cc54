// OptimizerShards: an optimizer step split between threads gives the bits of the whole step,
// for every optimizer kind it accepts, and it refuses what it cannot split.
#include "distribute/step/optimizer_shards.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <thread>

#include "dist/data/dataset.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/train/loss.h"
#include "distribute/step/optimizer_slots.h"
#include "distribute/strategies/mirrored_extended.h"

namespace dist {
namespace {

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

// The optimizer with its kind, as a step plan gets it for the walk of one step.
detail::OptimizerWithKind with_kind(torch::optim::Optimizer& optimizer) {
  return detail::OptimizerWithKind(optimizer);
}

// Sizes that put cuts inside parameters, remainders after the vectorized loops, and a
// parameter smaller than one alignment unit.
std::vector<torch::Tensor> make_parameters() {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{333, 301}, {7}, {129, 65}, {1001}, {3, 5}})
    params.push_back(torch::randn(shape).requires_grad_());
  return params;
}

std::vector<torch::Tensor> clone_all(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

void set_gradients(const std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (const auto& p : params) p.mutable_grad() = torch::randn_like(p);
}

// Every parameter's slots, in parameter order.
std::vector<std::map<std::string, at::Tensor>> slots_in_order(
    torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  std::map<const void*, std::map<std::string, at::Tensor>> by_impl;
  for (auto& [impl, slots] : detail::export_slots(with_kind(optimizer))) by_impl[impl] = slots;
  std::vector<std::map<std::string, at::Tensor>> out;
  for (const auto& p : params) out.push_back(by_impl[p.unsafeGetTensorImpl()]);
  return out;
}

void expect_same_bits(torch::optim::Optimizer& a, torch::optim::Optimizer& b,
                      const std::vector<torch::Tensor>& pa, const std::vector<torch::Tensor>& pb,
                      const std::string& what) {
  for (size_t i = 0; i < pa.size(); ++i)
    ASSERT_TRUE(torch::equal(pa[i], pb[i])) << what << ": parameter " << i;
  auto sa = slots_in_order(a, pa);
  auto sb = slots_in_order(b, pb);
  for (size_t i = 0; i < sa.size(); ++i) {
    ASSERT_EQ(sa[i].size(), sb[i].size()) << what << ": slots of parameter " << i;
    for (const auto& [name, t] : sa[i]) {
      ASSERT_EQ(sb[i].count(name), 1u) << what << ": slot " << name << " of parameter " << i;
      EXPECT_TRUE(torch::equal(t, sb[i].at(name)))
          << what << ": slot " << name << " of parameter " << i;
    }
  }
}

struct Case {
  const char* name;
  MakeOptimizer make;
  bool first_step_whole;  // its first step makes the slots, so that step cannot be split
};

std::vector<Case> cases() {
  using namespace torch::optim;
  auto of = [](auto options) {
    using Options = decltype(options);
    return [options](std::vector<torch::Tensor> p) -> std::unique_ptr<Optimizer> {
      if constexpr (std::is_same_v<Options, SGDOptions>) return std::make_unique<SGD>(p, options);
      if constexpr (std::is_same_v<Options, AdamOptions>) return std::make_unique<Adam>(p, options);
      if constexpr (std::is_same_v<Options, AdamWOptions>)
        return std::make_unique<AdamW>(p, options);
      if constexpr (std::is_same_v<Options, RMSpropOptions>)
        return std::make_unique<RMSprop>(p, options);
      if constexpr (std::is_same_v<Options, AdagradOptions>)
        return std::make_unique<Adagrad>(p, options);
    };
  };
  return {
      {"SGD", of(SGDOptions(0.1)), false},
      {"SGD momentum nesterov decay",
       of(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3)), true},
      {"Adam", of(AdamOptions(1e-2)), true},
      {"Adam amsgrad decay", of(AdamOptions(1e-2).amsgrad(true).weight_decay(1e-2)), true},
      {"AdamW", of(AdamWOptions(1e-2)), true},
      {"RMSprop centered momentum", of(RMSpropOptions(1e-2).centered(true).momentum(0.5)), true},
      // Adagrad makes its slots in its constructor.
      {"Adagrad decay", of(AdagradOptions(1e-1).lr_decay(1e-2)), false},
  };
}

// `shards` threads, each stepping its share, as replica threads do.
void step_in_threads(OptimizerShards& shards, int count) {
  std::vector<std::thread> threads;
  for (int k = 0; k < count; ++k) threads.emplace_back([&shards, k] { shards.step(k); });
  for (auto& t : threads) t.join();
}

// Shares, and blocks within them: the default block is larger than these parameters, one of
// 4,096 elements cuts the largest into 25 blocks and its last into 29 elements.
TEST(OptimizerShardsTest, SplitStepsEqualWholeStepsBitForBit) {
  constexpr int64_t kTotal = 333 * 301 + 7 + 129 * 65 + 1001 + 15;
  for (const Case& c : cases()) {
    for (auto [count, block] :
         std::vector<std::pair<int, int64_t>>{{2, OptimizerShards::kBlockElements},
                                              {3, OptimizerShards::kBlockElements},
                                              {1, 4096},
                                              {2, 4096}}) {
      const std::string what = std::string(c.name) + ", " + std::to_string(count) +
                               " shards, blocks of " + std::to_string(block);
      auto whole_params = make_parameters();
      auto split_params = clone_all(whole_params);
      auto whole = c.make(whole_params);
      auto split = c.make(split_params);
      OptimizerShards shards;
      for (int step = 0; step < 4; ++step) {
        set_gradients(whole_params, step);
        set_gradients(split_params, step);
        whole->step();
        const bool planned =
            shards.plan(with_kind(*split), count, /*min_elements_per_shard=*/1, block);
        EXPECT_EQ(planned, step > 0 || !c.first_step_whole) << what << ", step " << step;
        EXPECT_EQ(shards.planned(), planned) << what;
        if (planned) {
          int64_t total = 0;
          for (int k = 0; k < count; ++k) {
            EXPECT_GT(shards.elements(k), 0) << what;
            total += shards.elements(k);
          }
          EXPECT_EQ(total, kTotal) << what;
          // One share in blocks of 4,096: 25 of the 333 x 301 parameter, 3 of the 129 x 65.
          if (count == 1) {
            EXPECT_EQ(shards.blocks(0), 25 + 1 + 3 + 1 + 1) << what;
          }
          // Blocks of 4,096 elements go through step_all, on ATen's intra-op threads.
          if (block == 4096) {
            shards.step_all();
          } else {
            step_in_threads(shards, count);
          }
        } else {
          split->step();
        }
        expect_same_bits(*whole, *split, whole_params, split_params,
                         what + ", step " + std::to_string(step));
      }
    }
  }
}

// The step by packs: one share per set of whole parameters, stepped one after another on one
// thread (as packs land), last parameters first.
TEST(OptimizerShardsTest, SetsOfWholeParametersStepLikeTheWholeStepBitForBit) {
  for (const Case& c : cases()) {
    auto whole_params = make_parameters();
    auto split_params = clone_all(whole_params);
    auto whole = c.make(whole_params);
    auto split = c.make(split_params);
    const std::vector<std::vector<torch::Tensor>> sets{
        {split_params[4], split_params[3]}, {split_params[2]}, {split_params[1], split_params[0]}};
    OptimizerShards shards;
    for (int step = 0; step < 4; ++step) {
      const std::string what = std::string(c.name) + ", step " + std::to_string(step);
      set_gradients(whole_params, step);
      set_gradients(split_params, step);
      whole->step();
      const bool planned = shards.plan_sets(with_kind(*split), sets, /*block_elements=*/1024);
      EXPECT_EQ(planned, step > 0 || !c.first_step_whole) << what;
      if (planned) {
        ASSERT_EQ(shards.shares(), 3) << what;
        EXPECT_EQ(shards.blocks(2), 98 + 1) << what;  // blocks of 1,024 of 333 x 301, and 7
        EXPECT_EQ(shards.elements(0), 1001 + 15) << what;
        EXPECT_EQ(shards.elements(1), 129 * 65) << what;
        EXPECT_EQ(shards.elements(2), 333 * 301 + 7) << what;
        for (int k = 0; k < 3; ++k) shards.step(k);
      } else {
        split->step();
      }
      expect_same_bits(*whole, *split, whole_params, split_params, what);
    }
  }
}

TEST(OptimizerShardsTest, SetsRefuseWhatTheyCannotStepByPacks) {
  auto params = make_parameters();
  set_gradients(params, 0);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  OptimizerShards shards;
  EXPECT_TRUE(shards.plan_sets(with_kind(sgd),
                               {{params[0], params[1]}, {params[2], params[3], params[4]}}));
  EXPECT_FALSE(
      shards.plan_sets(with_kind(sgd), {{params[0], params[1], params[2], params[3], params[4]}}))
      << "one set: nothing lands before the rest";
  EXPECT_FALSE(shards.planned());
  EXPECT_FALSE(shards.plan_sets(with_kind(sgd), {{params[0], params[1]}, {params[2], params[3]}}))
      << "a parameter with a gradient in no set";
  torch::optim::LBFGS lbfgs(params, torch::optim::LBFGSOptions(0.1));
  EXPECT_FALSE(shards.plan_sets(with_kind(lbfgs),
                                {{params[0], params[1]}, {params[2], params[3], params[4]}}))
      << "an optimizer whose state it does not know";
  // A parameter in a set that the optimizer does not hold is not stepped.
  torch::optim::SGD some({params[0], params[1]}, torch::optim::SGDOptions(0.1));
  auto before = params[4].detach().clone();
  ASSERT_TRUE(shards.plan_sets(with_kind(some), {{params[0]}, {params[1], params[4]}}));
  EXPECT_EQ(shards.elements(1), 7);
  shards.step(0);
  shards.step(1);
  EXPECT_TRUE(torch::equal(params[4], before));
}

TEST(OptimizerShardsTest, SharesAreBalancedToWithinOneAlignmentUnit) {
  auto params = make_parameters();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  set_gradients(params, 0);
  OptimizerShards shards;
  ASSERT_TRUE(shards.plan(with_kind(sgd), 2, 1));
  EXPECT_LE(std::abs(shards.elements(0) - shards.elements(1)), 2 * OptimizerShards::kAlignment);
}

TEST(OptimizerShardsTest, RefusesWhatItCannotSplit) {
  auto params = make_parameters();
  set_gradients(params, 0);
  OptimizerShards shards;
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(shards.plan(with_kind(sgd), 1, 1)) << "one shard, all of it within one block";
  EXPECT_FALSE(shards.plan(with_kind(sgd), 0, 1)) << "no shard";
  EXPECT_FALSE(shards.plan(with_kind(sgd), 2)) << "too few elements for the default minimum";
  torch::optim::LBFGS lbfgs(params, torch::optim::LBFGSOptions(0.1));
  EXPECT_FALSE(shards.plan(with_kind(lbfgs), 2, 1)) << "an optimizer whose state it does not know";

  // A parameter that is a transposed view has no flat view.
  auto base = torch::randn({64, 32});
  auto transposed = base.t().detach().requires_grad_();
  transposed.mutable_grad() = torch::randn({64, 32}).t();
  torch::optim::SGD strided({transposed}, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(shards.plan(with_kind(strided), 2, 1)) << "a parameter that is not contiguous";

  // No gradients: nothing to split.
  auto fresh = clone_all(params);
  torch::optim::SGD idle(fresh, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(shards.plan(with_kind(idle), 2, 1));
}

// Under MirroredStrategy: two replicas that split each Adam step end with the bits of two
// replicas that leave the step to replica 0, in weights and in the optimizer's slots.
std::vector<torch::Tensor> train_mlp(bool shard) {
  MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};
  options.threads_per_replica = 1;
  options.shard_optimizer_step = shard;
  MirroredStrategy strategy(options);
  torch::manual_seed(11);
  auto model = strategy.mirror(torch::nn::Sequential(torch::nn::Linear(784, 200), torch::nn::ReLU(),
                                                     torch::nn::Linear(200, 10)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  torch::manual_seed(12);
  auto examples = data::Dataset::from_tensor_slices(
      {torch::randn({80, 784}), torch::randint(0, 10, {80}, torch::kLong)});
  for (const auto& batch :
       strategy.experimental_distribute_dataset(examples.batch(16)).iterator()) {
    strategy.run(
        [&](const data::Element& b) {
          auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          optimizer->apply_gradients();
          return loss.detach();
        },
        batch);
  }
  // The split really ran (Adam's first step runs whole, the later ones split).
  auto& variables = dynamic_cast<MirroredVariables&>(*model.shared_variables());
  const OptimizerShards* split = variables.step_plan().last_split();
  EXPECT_EQ(split != nullptr, shard);
  if (split != nullptr) {
    EXPECT_GT(split->elements(1), 70000);
  }
  // Weights, then every slot of every parameter.
  std::vector<torch::Tensor> values;
  auto params = model.primary()->parameters();
  for (const auto& p : params) values.push_back(p.detach().clone());
  for (const auto& slots : slots_in_order(optimizer->optimizer(), params))
    for (const auto& [name, t] : slots) values.push_back(t.clone());
  return values;
}

TEST(OptimizerShardsTest, MirroredReplicasSplittingTheStepMatchReplicaZeroAloneBitForBit) {
  auto split = train_mlp(true);
  auto alone = train_mlp(false);
  ASSERT_EQ(split.size(), alone.size());
  EXPECT_EQ(split.size(), 4u * 4u);  // 4 parameters; Adam's step, exp_avg, exp_avg_sq each
  for (size_t i = 0; i < split.size(); ++i)
    EXPECT_TRUE(torch::equal(split[i], alone[i])) << "value " << i;
}

}  // namespace
}  // namespace dist
