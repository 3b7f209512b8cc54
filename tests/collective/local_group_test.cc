// The in-process collectives (LocalGroup through LocalCommunicator), in Gloo's style: every
// world size from 1 to 5, one to three tensors of 0 to 1000 elements, integer data whose
// result is an exact formula, each of the three algorithms.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "collective/local/local_communicator.h"
#include "collective_test_util.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using testing::expected_sum;
using testing::member_tensor;
using testing::run_threads;

std::vector<std::unique_ptr<LocalCommunicator>> group_of(
    int size, CrossDeviceOps algorithm = CrossDeviceOps::kParallelAllReduce,
    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  LocalGroupOptions options;
  options.size = size;
  options.algorithm = algorithm;
  options.timeout = timeout;
  return make_local_group(options);
}

class LocalGroupTest : public ::testing::TestWithParam<std::tuple<int, CrossDeviceOps>> {};

TEST_P(LocalGroupTest, AllReduceIsExactForEveryOpCountAndSize) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  for (int count : {1, 2, 3}) {
    for (int64_t elements : {0, 1, 7, 1000}) {
      run_threads(size, [&](int r) {
        std::vector<at::Tensor> sum, mean, lo, hi;
        for (int t = 0; t < count; ++t) {
          sum.push_back(member_tensor(r, t, elements));
          mean.push_back(member_tensor(r, t, elements));
          lo.push_back(member_tensor(r, t, elements));
          hi.push_back(member_tensor(r, t, elements));
        }
        auto& c = *members[static_cast<size_t>(r)];
        c.all_reduce(sum, ReduceOp::kSum)->wait();
        c.all_reduce(mean, ReduceOp::kMean)->wait();
        c.all_reduce(lo, ReduceOp::kMin)->wait();
        c.all_reduce(hi, ReduceOp::kMax)->wait();
        for (int t = 0; t < count; ++t) {
          auto expected = expected_sum(size, t, elements);
          ASSERT_TRUE(at::equal(sum[t], expected)) << "size " << size << " rank " << r;
          ASSERT_TRUE(at::equal(mean[t], expected.div(size, "trunc")));
          ASSERT_TRUE(at::equal(lo[t], member_tensor(0, t, elements)));
          ASSERT_TRUE(at::equal(hi[t], member_tensor(size - 1, t, elements)));
        }
      });
    }
  }
}

TEST_P(LocalGroupTest, AllReduceToProcessLeaderWritesOnlyRankZero) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  run_threads(size, [&](int r) {
    std::vector<at::Tensor> tensors{member_tensor(r, 0, 33), member_tensor(r, 1, 5)};
    members[static_cast<size_t>(r)]->all_reduce_to_process_leader(tensors, ReduceOp::kSum)->wait();
    for (int t = 0; t < 2; ++t) {
      const int64_t n = t == 0 ? 33 : 5;
      auto expected = r == 0 ? expected_sum(size, t, n) : member_tensor(r, t, n);
      ASSERT_TRUE(at::equal(tensors[t], expected)) << "rank " << r;
    }
  });
}

TEST_P(LocalGroupTest, BroadcastFromEveryRoot) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  for (int root = 0; root < size; ++root) {
    run_threads(size, [&](int r) {
      std::vector<at::Tensor> tensors{member_tensor(r, 0, 10), member_tensor(r, 1, 3)};
      members[static_cast<size_t>(r)]->broadcast(tensors, root)->wait();
      ASSERT_TRUE(at::equal(tensors[0], member_tensor(root, 0, 10)));
      ASSERT_TRUE(at::equal(tensors[1], member_tensor(root, 1, 3)));
    });
  }
}

TEST_P(LocalGroupTest, AllGatherOfUnevenSizesIsInRankOrder) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  run_threads(size, [&](int r) {
    // Member r contributes r rows (member 0 none) of two columns, all equal to r.
    at::Tensor mine = at::full({r, 2}, r, at::kLong);
    at::Tensor all;
    members[static_cast<size_t>(r)]->all_gather(mine, &all)->wait();
    std::vector<at::Tensor> expected;
    for (int q = 0; q < size; ++q) expected.push_back(at::full({q, 2}, q, at::kLong));
    ASSERT_TRUE(at::equal(all, at::cat(expected, 0))) << "rank " << r;
  });
}

TEST_P(LocalGroupTest, ReduceScatterGivesEachRankItsChunkOfTheSum) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  const int64_t rows = 11;
  run_threads(size, [&](int r) {
    at::Tensor input = member_tensor(r, 0, rows);
    const auto [begin, end] = chunk_range(rows, size, r);
    at::Tensor out = at::empty({end - begin}, at::kLong);
    members[static_cast<size_t>(r)]->reduce_scatter(input, out, ReduceOp::kSum)->wait();
    ASSERT_TRUE(at::equal(out, expected_sum(size, 0, rows).slice(0, begin, end)));
  });
}

TEST_P(LocalGroupTest, SendRecvAroundTheRing) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  if (size == 1) {  // nobody to send to: a clear error, not a hang
    EXPECT_THROW(members[0]->send(member_tensor(0, 0, 4), 0, 7), InvalidArgument);
    return;
  }
  run_threads(size, [&](int r) {
    auto& c = *members[static_cast<size_t>(r)];
    c.send(member_tensor(r, 0, 4), (r + 1) % size, /*tag=*/7)->wait();
    c.send(member_tensor(r, 1, 4), (r + 1) % size, /*tag=*/8)->wait();
    at::Tensor first = at::empty({4}, at::kLong), second = at::empty({4}, at::kLong);
    const int from = (r + size - 1) % size;
    c.recv(second, from, 8)->wait();  // tags tell messages apart whatever the order
    c.recv(first, from, 7)->wait();
    ASSERT_TRUE(at::equal(first, member_tensor(from, 0, 4)));
    ASSERT_TRUE(at::equal(second, member_tensor(from, 1, 4)));
  });
}

TEST_P(LocalGroupTest, ExchangeAndBarrier) {
  const auto [size, algorithm] = GetParam();
  auto members = group_of(size, algorithm);
  run_threads(size, [&](int r) {
    auto& c = *members[static_cast<size_t>(r)];
    c.barrier()->wait();
    auto values = c.exchange("k", "v" + std::to_string(r));
    ASSERT_EQ(values.size(), static_cast<size_t>(size));
    for (int q = 0; q < size; ++q) EXPECT_EQ(values[q], "v" + std::to_string(q));
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LocalGroupTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values(CrossDeviceOps::kParallelAllReduce,
                                                              CrossDeviceOps::kReductionToOneDevice,
                                                              CrossDeviceOps::kHierarchicalCopy)),
                         [](const auto& info) {
                           return "size" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

TEST(LocalGroupFailureTest, AMemberThatNeverComesIsNamedWhenTheTimeoutExpires) {
  auto members = group_of(3, CrossDeviceOps::kParallelAllReduce, std::chrono::milliseconds(100));
  std::vector<std::string> messages(2);
  run_threads(2, [&](int r) {  // rank 2 never calls
    std::vector<at::Tensor> t{member_tensor(r, 0, 3)};
    try {
      members[static_cast<size_t>(r)]->all_reduce(t, ReduceOp::kSum);
      ADD_FAILURE() << "all_reduce returned without rank 2";
    } catch (const CollectiveError& e) {
      messages[static_cast<size_t>(r)] = e.what();
    }
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("replica(s) 2 did not reach all_reduce"), std::string::npos) << m;
    EXPECT_NE(m.find("0.1 s"), std::string::npos) << m;
  }
}

TEST(LocalGroupFailureTest, ARecvWithoutSendNamesTheSender) {
  auto members = group_of(2, CrossDeviceOps::kParallelAllReduce, std::chrono::milliseconds(50));
  at::Tensor t = at::empty({2}, at::kLong);
  try {
    members[0]->recv(t, 1, 3);
    FAIL() << "recv returned without a send";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("replica 1 did not send tag 3 to replica 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(LocalGroupFailureTest, MismatchedShapesNameTheReplica) {
  auto members = group_of(2);
  std::vector<std::string> messages(2);
  run_threads(2, [&](int r) {
    std::vector<at::Tensor> t{at::zeros({r == 0 ? 3 : 4}, at::kLong)};
    try {
      members[static_cast<size_t>(r)]->all_reduce(t, ReduceOp::kSum);
    } catch (const CollectiveError& e) {
      messages[static_cast<size_t>(r)] = e.what();
    }
  });
  for (const auto& m : messages)
    EXPECT_NE(m.find("tensor 0 is [4] Long on replica 1 but [3] Long on replica 0"),
              std::string::npos)
        << m;
}

}  // namespace
}  // namespace dist::collective
