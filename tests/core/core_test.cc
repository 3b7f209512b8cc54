#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist/core/device_name.h"
#include "dist/core/error.h"
#include "dist/core/per_replica.h"
#include "dist/core/reduce_op.h"
#include "dist/distribute/replica_context.h"

namespace dist {
namespace {

TEST(DeviceNameTest, ParsesTheCommonSpellings) {
  EXPECT_EQ(parse_device_name("cpu:0").to_string(), "cpu:0");
  EXPECT_EQ(parse_device_name("CPU:3").to_string(), "cpu:3");
  EXPECT_EQ(parse_device_name("/device:CPU:1").to_string(), "cpu:1");
  EXPECT_EQ(parse_device_name("cpu").to_string(), "cpu:0");
  EXPECT_EQ(parse_device_name("cuda:1").to_string(), "gpu:1");
  EXPECT_EQ(parse_device_name("GPU:0").kind, DeviceKind::kGpu);
  EXPECT_EQ(parse_device_name("cpu:2").torch_device(), c10::Device(c10::kCPU));
}

TEST(DeviceNameTest, RejectsBadNamesWithTheText) {
  for (const char* bad : {"tpu:0", "cpu:x", "cpu:-1", "", "cpu:12345678"}) {
    try {
      parse_device_name(bad);
      FAIL() << "accepted " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(logical_cpu_devices(3).size(), 3u);
  EXPECT_EQ(logical_cpu_devices(3)[2].to_string(), "cpu:2");
  EXPECT_THROW(logical_cpu_devices(0), InvalidArgument);
}

TEST(ReduceOpTest, NamesRoundTrip) {
  for (auto op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax})
    EXPECT_EQ(parse_reduce_op(to_string(op)), op);
  EXPECT_EQ(parse_reduce_op("mean"), ReduceOp::kMean);
  EXPECT_THROW(parse_reduce_op("avg"), InvalidArgument);
}

TEST(PerReplicaTest, IndexesAndRemembersGlobalBatchSize) {
  PerReplica<int> v({4, 5, 6}, 15);
  EXPECT_EQ(v.size(), 3);
  EXPECT_EQ(v[2], 6);
  EXPECT_EQ(v.global_batch_size(), 15);
  EXPECT_THROW(v[3], InvalidArgument);
  EXPECT_THROW(v[-1], InvalidArgument);
}

TEST(ErrorTest, InternalAssertNamesTheExpressionAndPlace) {
  try {
    DIST_INTERNAL_ASSERT(1 + 1 == 3, "math is ", "broken");
    FAIL();
  } catch (const InternalError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("1 + 1 == 3"), std::string::npos) << what;
    EXPECT_NE(what.find("core_test.cc"), std::string::npos) << what;
    EXPECT_NE(what.find("math is broken"), std::string::npos) << what;
  }
  try {
    DIST_CHECK_ARG(false, "value ", 7, " is bad");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "value 7 is bad");
  }
}

TEST(ReplicaContextTest, IsNullOutsideRunAndScoped) {
  EXPECT_EQ(get_replica_context(), nullptr);
  EXPECT_FALSE(in_multi_replica_context());
}

}  // namespace
}  // namespace dist
