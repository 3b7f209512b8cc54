// ShardedEmbedding in one process (no strategy, or the default one): an ordinary embedding
// whose gradient is the dense table gradient torch::embedding gives, and whose bad ids are
// refused by name. Its ParameterServerStrategy path (rows looked up on the ps tasks, sparse
// updates) is tested with real processes in ps_job_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/sharded_embedding.h"
#include "test_util.h"

namespace dist {
namespace {

TEST(ShardedEmbeddingTest, LooksUpRowsAndGivesTheDenseGradientOfTorchEmbedding) {
  torch::manual_seed(3);
  ShardedEmbedding layer(50, 8);
  const at::Tensor ids = torch::tensor({3, 7, 3, 49, 0, 7}, torch::kLong).view({2, 3});
  const at::Tensor out = layer(ids);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 8}));
  EXPECT_TRUE(torch::equal(out, torch::embedding(layer->weight, ids)));

  const at::Tensor upstream = torch::randn({2, 3, 8});
  (out * upstream).sum().backward();
  const at::Tensor weight = layer->weight.detach().clone().requires_grad_(true);
  (torch::embedding(weight, ids) * upstream).sum().backward();
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), weight.grad(), 0, 1e-6));
  EXPECT_FALSE(layer->weight.grad().is_sparse());
  // Rows no id names get no gradient.
  EXPECT_EQ(layer->weight.grad()[1].abs().sum().item<float>(), 0.0f);
}

TEST(ShardedEmbeddingTest, InitialValuesFollowTheOptionsAndCloneCopiesThem) {
  ShardedEmbeddingOptions options(1000, 4);
  options.init_range = 0.5;
  ShardedEmbedding layer(options);
  EXPECT_LE(layer->weight.abs().max().item<double>(), 0.5);
  EXPECT_GT(layer->weight.abs().max().item<double>(), 0.4);  // spread over the whole range
  auto copy = std::dynamic_pointer_cast<ShardedEmbeddingImpl>(layer->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(torch::equal(copy->weight, layer->weight));
  EXPECT_NE(copy->weight.data_ptr(), layer->weight.data_ptr());
  EXPECT_EQ(copy->options().init_range, 0.5);
}

TEST(ShardedEmbeddingTest, BadIdsAndShapesAreRefusedByName) {
  ShardedEmbedding layer(10, 2);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layer(torch::tensor({1.0f, 2.0f}));
            }).find("ids must be integer row numbers"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layer(torch::tensor({1, 10}));
            }).find("id 10 is outside the table's 10 rows"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([&] {
              layer(torch::tensor({-1, 2}));
            }).find("id -1 is outside"),
            std::string::npos);
  EXPECT_NE(testing::message_of<InvalidArgument>([] {
              ShardedEmbedding(0, 4);
            }).find("at least one row and one column, got 0 x 4"),
            std::string::npos);
  // No ids: an empty result of the right shape.
  EXPECT_EQ(layer(torch::zeros({0, 3}, torch::kLong)).sizes(), (std::vector<int64_t>{0, 3, 2}));
}

}  // namespace
}  // namespace dist
