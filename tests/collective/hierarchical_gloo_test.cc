// HierarchicalCommunicator over real Gloo on 127.0.0.1: P "processes" (Gloo members, each a
// thread of this test with its own TCP connections) of L replica threads each, in Gloo's
// test style. Integer data, exact results; 2x2 and 3x2, every collective, uneven
// all_gather, point to point within and across processes, and deadlines that name the
// missing member.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <iostream>
#include <set>

#include "collective/factory.h"
#include "collective/hierarchical_communicator.h"
#include "collective_test_util.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"

namespace dist::collective {
namespace {

using testing::expected_sum;
using testing::loopback_spec;
using testing::member_tensor;
using testing::run_threads;

using testing::gloo_group;
using testing::hierarchical_world;
using testing::release;

class HierarchicalGlooTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(HierarchicalGlooTest, EveryCollectiveIsExact) {
  const auto [processes, local] = GetParam();
  auto world = hierarchical_world(processes, local);
  const int size = processes * local;
  run_threads(size, [&](int g) {
    Communicator& c = *world->replicas[static_cast<size_t>(g)];
    ASSERT_EQ(c.rank(), g);
    ASSERT_EQ(c.size(), size);
    for (int64_t elements : {0, 1, 1000}) {
      std::vector<at::Tensor> sum{member_tensor(g, 0, elements), member_tensor(g, 1, 3)};
      c.all_reduce(sum, ReduceOp::kSum)->wait();
      ASSERT_TRUE(at::equal(sum[0], expected_sum(size, 0, elements))) << "rank " << g;
      ASSERT_TRUE(at::equal(sum[1], expected_sum(size, 1, 3)));
    }
    std::vector<at::Tensor> hi{member_tensor(g, 0, 5)}, lo{member_tensor(g, 0, 5)};
    c.all_reduce(hi, ReduceOp::kMax)->wait();
    c.all_reduce(lo, ReduceOp::kMin)->wait();
    ASSERT_TRUE(at::equal(hi[0], member_tensor(size - 1, 0, 5)));
    ASSERT_TRUE(at::equal(lo[0], member_tensor(0, 0, 5)));

    // Gradients: the sum lands in each process's first replica only.
    std::vector<at::Tensor> grads{member_tensor(g, 0, 9)};
    c.all_reduce_to_process_leader(grads, ReduceOp::kSum)->wait();
    ASSERT_TRUE(
        at::equal(grads[0], g % local == 0 ? expected_sum(size, 0, 9) : member_tensor(g, 0, 9)));

    for (int root = 0; root < size; ++root) {
      std::vector<at::Tensor> b{member_tensor(g, 0, 4)};
      c.broadcast(b, root)->wait();
      ASSERT_TRUE(at::equal(b[0], member_tensor(root, 0, 4))) << "root " << root;
    }

    at::Tensor gathered;  // uneven: rank g gives g rows
    c.all_gather(at::full({g, 3}, g, at::kLong), &gathered)->wait();
    std::vector<at::Tensor> parts;
    for (int q = 0; q < size; ++q) parts.push_back(at::full({q, 3}, q, at::kLong));
    ASSERT_TRUE(at::equal(gathered, at::cat(parts, 0)));

    const auto [begin, end] = chunk_range(13, size, g);
    at::Tensor chunk = at::empty({end - begin}, at::kLong);
    c.reduce_scatter(member_tensor(g, 0, 13), chunk, ReduceOp::kSum)->wait();
    ASSERT_TRUE(at::equal(chunk, expected_sum(size, 0, 13).slice(0, begin, end)));

    // Around the ring: within a process and across processes alike.
    // A Gloo send completes once its receiver took it: wait for it after our own recv.
    auto sent = c.send(member_tensor(g, 0, 6), (g + 1) % size, 5);
    at::Tensor got = at::empty({6}, at::kLong);
    const int from = (g + size - 1) % size;
    c.recv(got, from, 5)->wait();
    sent->wait();
    ASSERT_TRUE(at::equal(got, member_tensor(from, 0, 6)));

    c.barrier()->wait();
    auto values = c.exchange("names", "r" + std::to_string(g));
    ASSERT_EQ(values.size(), static_cast<size_t>(size));
    for (int q = 0; q < size; ++q) ASSERT_EQ(values[q], "r" + std::to_string(q));
  });
}

INSTANTIATE_TEST_SUITE_P(ProcessesTimesReplicas, HierarchicalGlooTest,
                         ::testing::Values(std::make_tuple(2, 2), std::make_tuple(3, 2),
                                           std::make_tuple(2, 1)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "x" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(GlooCommunicatorTest, ADeadlineThatExpiresNamesTheMemberThatNeverCame) {
  // Without the agreement before each collective, issuing returns at once and the wait's own
  // deadline is what expires (with it, issuing blocks until every member issued).
  auto members = gloo_group(2, std::chrono::seconds(3), /*check_collectives=*/false);
  std::string message;
  // worker:1 is alive (its heartbeat runs) but never issues the all_reduce.
  std::vector<at::Tensor> t{member_tensor(0, 0, 4)};
  auto work = members[0]->all_reduce(t, ReduceOp::kSum);
  try {
    work->wait(std::chrono::milliseconds(500));
    ADD_FAILURE() << "all_reduce completed without worker:1";
  } catch (const CollectiveError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("worker:1 (127.0.0.1:"), std::string::npos) << message;
  EXPECT_NE(message.find("did not reach all_reduce (collective #1)"), std::string::npos) << message;
  release(members);
}

TEST(GlooCommunicatorTest, MembersThatIssueDifferentCollectivesGetANamedErrorNotAnAbort) {
  auto members = gloo_group(2);
  // Without the agreement before each collective, Gloo would abort this process when the
  // 1000-element message meets the 4-element buffer.
  testing::expect_mismatch_named(members);
  release(members);
}

// The backstop, with the agreement turned off: Gloo's own thread meets a message of the wrong
// size and throws where nothing can catch it. The process still ends with a named error and
// exit code 1, not "terminate called" and SIGABRT.
TEST(GlooCommunicatorDeathTest, UncheckedMismatchedCollectivesEndInANamedErrorAndExitCode1) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto members = gloo_group(2, std::chrono::seconds(10), /*check_collectives=*/false);
        run_threads(2, [&](int p) {
          std::vector<at::Tensor> t{member_tensor(p, 0, p == 0 ? 4 : 100000)};
          try {
            members[static_cast<size_t>(p)]->all_reduce(t, ReduceOp::kSum)->wait();
          } catch (const std::exception&) {
          }
        });
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "Gloo failed on its own thread");
}

// The ring's chunks follow the rows: members with the same number of values in different
// rows would send chunks of different sizes, which Gloo meets with an abort. The agreement
// includes the rows, so they get a named error instead.
TEST(GlooCommunicatorTest, ReduceScattersOfTheSameValuesInDifferentRowsAreNamed) {
  auto members = gloo_group(2);
  run_threads(2, [&](int p) {
    const at::Tensor input =
        at::zeros(p == 0 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}, at::kLong);
    // Each member's own chunk: 2 of 4 rows of 3, 1 of 3 rows of 4.
    at::Tensor chunk = at::empty({p == 0 ? 2 : 1, p == 0 ? 3 : 4}, at::kLong);
    try {
      members[static_cast<size_t>(p)]->reduce_scatter(input, chunk, ReduceOp::kSum)->wait();
      ADD_FAILURE() << "mismatched reduce_scatter completed";
    } catch (const CollectiveError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("issued reduce_scatter SUM of 12 Long values in 4 rows"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("issued reduce_scatter SUM of 12 Long values in 3 rows"),
                std::string::npos)
          << message;
    }
  });
  release(members);
}

// Tags from kFirstReservedTag on are the ring's: a user's send or recv there could pair with it.
TEST(GlooCommunicatorTest, PointToPointTagsOfTheLibraryAreRefused) {
  auto members = gloo_group(2);
  at::Tensor t = at::zeros({2});
  EXPECT_THROW(members[0]->send(t, 1, 1 << 30), InvalidArgument);
  EXPECT_THROW(members[1]->recv(t, 0, -1), InvalidArgument);
  release(members);
}

TEST(GlooCommunicatorTest, AMemberThatAbortsIsNamedWithItsReasonAtOnce) {
  auto members = gloo_group(2);
  testing::expect_abort_named_at_once(members);
  release(members);
}

TEST(GlooCommunicatorTest, ListensOnlyOnTheConfiguredAddress) {
  // Gloo's per-pair listeners live only while the mesh connects: watch the whole formation.
  std::atomic<bool> formed{false};
  std::set<std::string> seen;
  std::thread watcher([&] {
    while (!formed) {
      for (const auto& address : testing::listening_addresses_of_this_process())
        seen.insert(address);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  auto members = gloo_group(3);
  formed = true;
  watcher.join();
  for (const auto& address : testing::listening_addresses_of_this_process()) seen.insert(address);
  EXPECT_FALSE(seen.empty());  // the store, at least
  for (const auto& address : seen)
    EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address << " is not the configured address";
  std::cout << "listeners seen while 3 members formed: " << seen.size() << std::endl;
  release(members);
}

TEST(GlooCommunicatorTest, UnknownBackendIsNamed) {
  try {
    make_process_communicator("carrier-pigeon", ProcessGroupSpec{});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown collective backend 'carrier-pigeon'"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace dist::collective
