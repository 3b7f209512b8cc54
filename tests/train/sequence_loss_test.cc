// The sequence loss over the global batch's tokens (dist/train/sequence_loss.h): its values,
// its errors, the all-reduced token count, and N replicas == one device with uneven padding.
#include "dist/train/sequence_loss.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "collective/local/local_communicator.h"
#include "dist/core/error.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/replica_context.h"
#include "equivalence_data.h"
#include "expect_error.h"
#include "replica_threads.h"

namespace dist {
namespace {

using ::testing::HasSubstr;

using testing::error_of;
using testing::run_replicas;

constexpr int64_t kPad = 99;  // outside the vocabulary on purpose

TEST(SequenceLossTest, PerTokenIsCrossEntropyAndExactlyZeroAtPadding) {
  torch::manual_seed(3);
  const at::Tensor logits = torch::randn({2, 3, 5}, torch::kDouble);
  const at::Tensor targets =
      torch::tensor(std::vector<int64_t>{4, 0, kPad, 2, kPad, kPad}).reshape({2, 3});
  const at::Tensor losses = SequenceCrossentropy(kPad).per_token(targets, logits);
  ASSERT_EQ(losses.sizes(), targets.sizes());
  const at::Tensor log_p = torch::log_softmax(logits, 2);
  EXPECT_NEAR(losses[0][0].item<double>(), -log_p[0][0][4].item<double>(), 1e-12);
  EXPECT_NEAR(losses[0][1].item<double>(), -log_p[0][1][0].item<double>(), 1e-12);
  EXPECT_NEAR(losses[1][0].item<double>(), -log_p[1][0][2].item<double>(), 1e-12);
  EXPECT_EQ(losses[0][2].item<double>(), 0.0);
  EXPECT_EQ(losses[1][1].item<double>(), 0.0);
  EXPECT_EQ(losses[1][2].item<double>(), 0.0);
  // Outside a run: the mean over the 3 real tokens.
  const double expected = (losses.sum() / 3).item<double>();
  EXPECT_NEAR(SequenceCrossentropy(kPad)(targets, logits).item<double>(), expected, 1e-12);
  // The same from a mask (the padded ids then may be anything in the vocabulary).
  const at::Tensor mask = targets.ne(kPad);
  const at::Tensor zero_padded = torch::where(mask, targets, torch::zeros_like(targets));
  EXPECT_NEAR(SequenceCrossentropy()(zero_padded, logits, mask).item<double>(), expected, 1e-12);
  EXPECT_NEAR(SequenceCrossentropy()(zero_padded, logits, mask.to(torch::kFloat)).item<double>(),
              expected, 1e-12);
}

TEST(SequenceLossTest, NonFinitePaddedLogitsDoNotReachTheLossOrGradient) {
  at::Tensor logits = torch::zeros({1, 2, 3}, torch::kDouble);
  logits[0][1].fill_(std::numeric_limits<double>::infinity());
  logits.requires_grad_(true);
  const at::Tensor targets = torch::tensor(std::vector<int64_t>{1, kPad}).reshape({1, 2});
  const at::Tensor loss = SequenceCrossentropy(kPad)(targets, logits);
  EXPECT_NEAR(loss.item<double>(), std::log(3.0), 1e-12);
  loss.backward();
  EXPECT_TRUE(torch::isfinite(logits.grad()).all().item<bool>());
  EXPECT_EQ(logits.grad()[0][1].abs().sum().item<double>(), 0.0);
}

TEST(SequenceLossTest, NoRealTokenGivesZeroWithAGraph) {
  const at::Tensor logits = torch::randn({2, 2, 4}).requires_grad_(true);
  const at::Tensor targets = torch::full({2, 2}, kPad);
  const at::Tensor loss = SequenceCrossentropy(kPad)(targets, logits);
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_EQ(logits.grad().abs().sum().item<double>(), 0.0);
}

TEST(SequenceLossTest, BadInputIsNamed) {
  const at::Tensor logits = torch::zeros({2, 3, 5});
  SequenceCrossentropy loss(kPad);
  EXPECT_THAT(
      error_of<InvalidArgument>([&] {
        loss(torch::tensor(std::vector<int64_t>{1, 7, kPad, 0, 0, 0}).reshape({2, 3}), logits);
      }),
      HasSubstr("the target at [0, 1] is token id 7, outside the vocabulary of 5"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                SequenceCrossentropy()(torch::full({2, 3}, -100), logits);
              }),
              HasSubstr("if it marks padding, give the padding id or a mask"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                loss(torch::zeros({2, 4}).to(torch::kLong), logits);
              }),
              HasSubstr("targets must be integer token ids of shape [batch, time] = [2, 3]"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                loss(torch::zeros({2, 3}), logits);
              }),
              HasSubstr("of dtype Float"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                loss(torch::zeros({2, 3}).to(torch::kLong), torch::zeros({6, 5}));
              }),
              HasSubstr("logits must be floating [batch, time, vocabulary]"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                loss(torch::zeros({2, 3}).to(torch::kLong), logits, torch::ones({3, 2}));
              }),
              HasSubstr("the mask of shape [3, 2] is not the shape of the targets, [2, 3]"));
  EXPECT_THAT(error_of<InvalidArgument>([&] {
                compute_average_token_loss(torch::zeros({2, 3}), torch::ones({2, 3}), -2);
              }),
              HasSubstr("global_token_count must be >= 0"));
}

// Every replica learns the sum of the replicas' counts, an empty share included.
TEST(SequenceLossTest, ReplicasLearnTheGlobalTokenCount) {
  const std::vector<int64_t> local = {3, 0, 5};
  std::vector<int64_t> seen(3, -1);
  std::vector<double> losses(3);
  run_replicas(3, [&](int r) {
    const at::Tensor mask = torch::arange(6).lt(local[static_cast<size_t>(r)]).reshape({2, 3});
    seen[static_cast<size_t>(r)] = global_token_count(mask);
    losses[static_cast<size_t>(r)] =
        compute_average_token_loss(torch::full({2, 3}, 2.0), mask).item<double>();
  });
  EXPECT_EQ(seen, (std::vector<int64_t>{8, 8, 8}));
  EXPECT_DOUBLE_EQ(losses[0], 3 * 2.0 / 8);
  EXPECT_DOUBLE_EQ(losses[1], 0.0);
  EXPECT_DOUBLE_EQ(losses[2], 5 * 2.0 / 8);
  // A count given is used as is, with no collective (one replica calling alone does not hang).
  run_replicas(2, [&](int r) {
    if (r == 0) {
      EXPECT_DOUBLE_EQ(
          compute_average_token_loss(torch::full({4}, 1.0), torch::ones({4}), 16).item<double>(),
          0.25);
    }
  });
}

// ---- N replicas == one device, with uneven padding ----------------------------------------

constexpr int64_t kVocabulary = 11;
constexpr int64_t kTime = 9;
constexpr int64_t kSequenceBatch = 7;  // 3 + 2 + 2 on 3 replicas
constexpr int kSequenceSteps = 20;

struct Batch {
  at::Tensor inputs;   // [kSequenceBatch, kTime] ids
  at::Tensor targets;  // the same shape, kPad after each sequence's length
};

// Sequences of 1 to kTime tokens: the replicas' shares have different token counts each step.
std::vector<Batch> make_batches() {
  torch::manual_seed(11);
  std::vector<Batch> batches;
  for (int s = 0; s < kSequenceSteps; ++s) {
    const at::Tensor lengths = torch::randint(1, kTime + 1, {kSequenceBatch, 1});
    const at::Tensor real = torch::arange(kTime).unsqueeze(0).lt(lengths);
    Batch b;
    b.inputs = torch::randint(0, kVocabulary, {kSequenceBatch, kTime});
    b.targets = torch::where(real, torch::remainder(b.inputs * 3 + 1, kVocabulary),
                             torch::full({}, kPad, torch::kLong));
    batches.push_back(b);
  }
  return batches;
}

torch::nn::Sequential make_model() {
  torch::manual_seed(5);
  return torch::nn::Sequential(torch::nn::Embedding(kVocabulary, 6), torch::nn::Tanh(),
                               torch::nn::Linear(6, kVocabulary));
}

// The rows of `t` that replica `r` of `replicas` gets: the first replicas one more when uneven.
at::Tensor share(const at::Tensor& t, int r, int replicas) {
  const int64_t n = t.size(0), base = n / replicas, extra = n % replicas;
  const int64_t start = r * base + std::min<int64_t>(r, extra);
  return t.slice(0, start, start + base + (r < extra ? 1 : 0));
}

enum class Averaging { kGlobalTokens, kPerReplicaMean };

std::vector<at::Tensor> train(const Strategy& strategy, Averaging averaging) {
  auto model = strategy.mirror(make_model());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.5));
  const SequenceCrossentropy loss_fn(kPad);
  const int replicas = strategy.num_replicas_in_sync();
  for (const Batch& batch : make_batches()) {
    std::vector<at::Tensor> inputs, targets;
    for (int r = 0; r < replicas; ++r) {
      inputs.push_back(share(batch.inputs, r, replicas));
      targets.push_back(share(batch.targets, r, replicas));
    }
    strategy.run(
        [&](const at::Tensor& x, const at::Tensor& y) {
          const at::Tensor logits = model->forward(x);
          at::Tensor loss;
          if (averaging == Averaging::kGlobalTokens) {
            loss = loss_fn(y, logits);
          } else {  // the usual mistake: each replica's own mean, over the replicas
            const at::Tensor mask = loss_fn.token_mask(y);
            loss = loss_fn.per_token(y, logits).sum() / mask.sum() / replicas;
          }
          loss.backward();
          optimizer->apply_gradients();
        },
        PerReplica<at::Tensor>(inputs, kSequenceBatch),
        PerReplica<at::Tensor>(targets, kSequenceBatch));
  }
  std::vector<at::Tensor> weights;
  for (const auto& p : model.primary()->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

MirroredOptions replica_options(int count) {
  MirroredOptions options;
  for (int r = 0; r < count; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.threads_per_replica = 1;
  return options;
}

TEST(SequenceLossEquivalenceTest, ReplicasEqualOneDeviceWithUnevenPadding) {
  const auto expected = train(OneDeviceStrategy(), Averaging::kGlobalTokens);
  std::vector<at::Tensor> initial;
  for (const auto& p : make_model()->parameters()) initial.push_back(p.detach());
  EXPECT_GT(testing::max_relative_difference(expected, initial), 1e-2) << "nothing trained";
  for (int count : {2, 3}) {
    const auto actual = train(MirroredStrategy(replica_options(count)), Averaging::kGlobalTokens);
    const double difference = testing::max_relative_difference(actual, expected);
    std::printf("%d replicas against one device after %d steps: max relative difference %.3g\n",
                count, kSequenceSteps, difference);
    EXPECT_LT(difference, 1e-5) << count << " replicas";
  }
  const auto central = train(CentralStorageStrategy(replica_options(3)), Averaging::kGlobalTokens);
  EXPECT_LT(testing::max_relative_difference(central, expected), 1e-5) << "central storage";
  // The per-replica mean trains another model: the test can tell.
  const auto wrong = train(MirroredStrategy(replica_options(3)), Averaging::kPerReplicaMean);
  const double wrong_difference = testing::max_relative_difference(wrong, expected);
  std::printf("per-replica means on 3 replicas against one device: %.3g\n", wrong_difference);
  EXPECT_GT(wrong_difference, 1e-3);
}

}  // namespace
}  // namespace dist
