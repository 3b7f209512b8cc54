#include <gtest/gtest.h>

#include <cmath>

#include "dist/core/error.h"
#include "dist/train/learning_rate_scaling.h"

namespace dist {
namespace {

TEST(LearningRateScalingTest, LinearAndSquareRootRules) {
  // 64 per replica on 4 replicas: 4x the batch.
  EXPECT_DOUBLE_EQ(scale_learning_rate_linear(1e-3, 64, 256), 4e-3);
  EXPECT_DOUBLE_EQ(scale_learning_rate_sqrt(1e-3, 64, 256), 2e-3);
  EXPECT_DOUBLE_EQ(scale_learning_rate_linear(0.1, 128, 64), 0.05);  // smaller batch too
  EXPECT_DOUBLE_EQ(scale_learning_rate_sqrt(0.1, 64, 128), 0.1 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(scale_learning_rate_linear(0.1, 64, 64), 0.1);
}

TEST(LearningRateScalingTest, WarmupRisesLinearlyThenHolds) {
  EXPECT_DOUBLE_EQ(warmup_learning_rate(0, 0.4, 4), 0.1);
  EXPECT_DOUBLE_EQ(warmup_learning_rate(1, 0.4, 4), 0.2);
  EXPECT_DOUBLE_EQ(warmup_learning_rate(3, 0.4, 4), 0.4);
  EXPECT_DOUBLE_EQ(warmup_learning_rate(9, 0.4, 4), 0.4);
  EXPECT_DOUBLE_EQ(warmup_learning_rate(0, 0.4, 0), 0.4);  // no warmup
}

TEST(LearningRateScalingTest, BadValuesAreNamedErrors) {
  EXPECT_THROW(scale_learning_rate_linear(1e-3, 0, 64), InvalidArgument);
  EXPECT_THROW(scale_learning_rate_sqrt(1e-3, 64, -1), InvalidArgument);
  EXPECT_THROW(scale_learning_rate_linear(NAN, 64, 64), InvalidArgument);
  EXPECT_THROW(warmup_learning_rate(-1, 0.1, 5), InvalidArgument);
}

}  // namespace
}  // namespace dist
