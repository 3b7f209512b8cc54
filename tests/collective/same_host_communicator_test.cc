// SameHostCommunicator: members on one host share memory for all_reduce, broadcast, barrier,
// all_gather and reduce_scatter. Members are threads of this test here (each its own Gloo member
// and its own mapping of the segment); the multi-worker tests run the same path between real
// processes (tests/multi_worker: collectives, equivalence, a killed worker). Slots of 64 bytes make
// every collective above 16 floats travel in several parts.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <dirent.h>
#include <unistd.h>

#include "collective/factory.h"
#include "collective/shm/same_host_communicator.h"
#include "collective_test_util.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"

namespace dist::collective {
namespace {

using testing::expected_sum;
using testing::member_tensor;
using testing::run_threads;
using testing::same_host_group;

using testing::release;

// Only this process's segments count (their names start with dist-<pid of the creator>-): other
// tests run beside this one and may hold a segment of their own for a moment.
int dist_segments_in_dev_shm() {
  const std::string ours = "dist-" + std::to_string(getpid()) + "-";
  int n = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) n += std::string(entry->d_name).rfind(ours, 0) == 0;
    closedir(dir);
  }
  return n;
}

class SameHostCommunicatorTest : public ::testing::TestWithParam<int> {};

// Member r's all-reduces of every op over integer and float data, of every length and layout,
// against their exact results.
void expect_all_reduces_exact(Communicator& c, int size, int r) {
  for (int64_t elements : {0, 1, 7, 1000}) {
    std::vector<at::Tensor> sum{member_tensor(r, 0, elements), member_tensor(r, 1, 3)};
    c.all_reduce(sum, ReduceOp::kSum)->wait();
    ASSERT_TRUE(at::equal(sum[0], expected_sum(size, 0, elements))) << elements;
    ASSERT_TRUE(at::equal(sum[1], expected_sum(size, 1, 3)));
  }
  std::vector<at::Tensor> hi{member_tensor(r, 0, 50)}, lo{member_tensor(r, 0, 50)};
  c.all_reduce(hi, ReduceOp::kMax)->wait();
  c.all_reduce(lo, ReduceOp::kMin)->wait();
  ASSERT_TRUE(at::equal(hi[0], member_tensor(size - 1, 0, 50)));
  ASSERT_TRUE(at::equal(lo[0], member_tensor(0, 0, 50)));
  // MEAN of integers truncates, as over Gloo.
  std::vector<at::Tensor> mean{member_tensor(r, 0, 40)};
  c.all_reduce(mean, ReduceOp::kMean)->wait();
  ASSERT_TRUE(at::equal(mean[0], expected_sum(size, 0, 40).div(size, "trunc")));
  // A strided tensor is reduced in place too.
  at::Tensor matrix = member_tensor(r, 0, 60).reshape({6, 10});
  std::vector<at::Tensor> transposed{matrix.t()};
  c.all_reduce(transposed, ReduceOp::kSum)->wait();
  ASSERT_TRUE(at::equal(matrix, expected_sum(size, 0, 60).reshape({6, 10})));
  // Floats: every member holds the same bits.
  std::vector<at::Tensor> floats{at::arange(100, at::kFloat).mul(0.1f * (r + 1))};
  c.all_reduce(floats, ReduceOp::kSum)->wait();
  at::Tensor expected = at::zeros({100}, at::kFloat);
  for (int m = 0; m < size; ++m) expected.add_(at::arange(100, at::kFloat).mul(0.1f * (m + 1)));
  ASSERT_TRUE(at::equal(floats[0], expected));
}

// Member r's broadcasts from every root, of tensors of mixed dtypes.
void expect_broadcasts_exact(Communicator& c, int size, int r) {
  for (int root = 0; root < size; ++root) {
    // Mixed dtypes, as a model's parameters and integer buffers.
    std::vector<at::Tensor> b{member_tensor(r, 0, 40).to(at::kFloat), member_tensor(r, 1, 3),
                              member_tensor(r, 2, 30).to(at::kFloat)};
    c.broadcast(b, root)->wait();
    ASSERT_TRUE(at::equal(b[0], member_tensor(root, 0, 40).to(at::kFloat))) << root;
    ASSERT_TRUE(at::equal(b[1], member_tensor(root, 1, 3)));
    ASSERT_TRUE(at::equal(b[2], member_tensor(root, 2, 30).to(at::kFloat)));
  }
}

// Member r's all-gathers and reduce-scatters, against their exact results.
void expect_gathers_and_scatters_exact(Communicator& c, int size, int r) {
  // Members gather parts of different sizes (member 0's is empty), and parts larger than a
  // slot, in several rounds.
  for (int64_t rows : {int64_t{1}, int64_t{300}}) {
    at::Tensor gathered;
    c.all_gather(at::full({r * rows, 2}, r, at::kLong), &gathered)->wait();
    std::vector<at::Tensor> parts;
    for (int q = 0; q < size; ++q) parts.push_back(at::full({q * rows, 2}, q, at::kLong));
    ASSERT_TRUE(at::equal(gathered, at::cat(parts, 0))) << rows;
  }
  // Each member's chunk of the sum, for inputs shorter than the members, of one slot and of
  // several; rows of 3 elements keep the chunks whole rows.
  for (int64_t elements : {int64_t{1}, int64_t{13}, int64_t{1000}}) {
    at::Tensor input = member_tensor(r, 0, elements);
    const auto [begin, end] = chunk_range(elements, size, r);
    at::Tensor chunk = at::empty({end - begin}, input.options());
    c.reduce_scatter(input, chunk, ReduceOp::kSum)->wait();
    ASSERT_TRUE(at::equal(chunk, expected_sum(size, 0, elements).slice(0, begin, end))) << elements;
  }
  at::Tensor matrix_rows = member_tensor(r, 1, 99).reshape({33, 3});
  const auto [first, last] = chunk_range(33, size, r);
  at::Tensor rows_chunk = at::empty({last - first, 3}, matrix_rows.options());
  c.reduce_scatter(matrix_rows, rows_chunk, ReduceOp::kMax)->wait();
  ASSERT_TRUE(
      at::equal(rows_chunk, member_tensor(size - 1, 1, 99).reshape({33, 3}).slice(0, first, last)));
}

TEST_P(SameHostCommunicatorTest, EveryCollectiveIsExactInSeveralParts) {
  const int size = GetParam();
  auto members = same_host_group(size);
  for (auto& m : members) ASSERT_TRUE(dynamic_cast<SameHostCommunicator&>(*m).uses_shared_memory());
  run_threads(size, [&](int r) {
    Communicator& c = *members[static_cast<size_t>(r)];
    ASSERT_NO_FATAL_FAILURE(expect_all_reduces_exact(c, size, r));
    ASSERT_NO_FATAL_FAILURE(expect_broadcasts_exact(c, size, r));
    c.barrier()->wait();
    ASSERT_NO_FATAL_FAILURE(expect_gathers_and_scatters_exact(c, size, r));
  });
  release(members);
  EXPECT_EQ(dist_segments_in_dev_shm(), 0) << "a segment's name was left in /dev/shm";
}

INSTANTIATE_TEST_SUITE_P(Members, SameHostCommunicatorTest, ::testing::Values(2, 3, 4));

TEST(SameHostCommunicatorTest, MembersThatIssueDifferentCollectivesGetANamedError) {
  auto members = same_host_group(2);
  testing::expect_mismatch_named(members);
  // The communicator is unusable afterwards, and says so.
  for (auto& member : members) {
    std::vector<at::Tensor> again{member_tensor(0, 0, 4)};
    EXPECT_THROW(member->all_reduce(again, ReduceOp::kSum), CollectiveError);
  }
  release(members);
}

TEST(SameHostCommunicatorTest, AMemberThatAbortsIsNamedWithItsReasonAtOnce) {
  auto members = same_host_group(2);
  testing::expect_abort_named_at_once(members);
  release(members);
}

TEST(SameHostCommunicatorTest, ATimeoutNamesTheMemberThatNeverCame) {
  auto members = same_host_group(3, std::chrono::seconds(1));
  run_threads(3, [&](int r) {
    if (r == 2) return;  // alive, but never issues the barrier
    try {
      members[static_cast<size_t>(r)]->barrier()->wait();
      ADD_FAILURE() << "barrier completed without worker:2";
    } catch (const CollectiveError& e) {
      const std::string message = e.what();
      // The first to time out names worker:2; the other may hear of it from the first.
      EXPECT_NE(message.find("worker:2 (127.0.0.1:"), std::string::npos) << message;
      EXPECT_NE(message.find("barrier (collective #1)"), std::string::npos) << message;
    }
  });
  release(members);
}

// share_memory maps one segment into every member: what one writes, the others read (each
// member here is its own mapping, at its own address); its name is gone from /dev/shm at once.
TEST(SameHostCommunicatorTest, SharedMemoryIsOneMemoryForEveryMember) {
  auto members = same_host_group(3);
  std::vector<std::shared_ptr<void>> regions(3);
  run_threads(3, [&](int r) {
    auto& c = *members[static_cast<size_t>(r)];
    regions[static_cast<size_t>(r)] = c.share_memory(3 * 1024);
    ASSERT_NE(regions[static_cast<size_t>(r)], nullptr);
    auto* bytes = static_cast<unsigned char*>(regions[static_cast<size_t>(r)].get());
    for (int i = 0; i < 1024; ++i) bytes[r * 1024 + i] = static_cast<unsigned char>(r + i);
    c.barrier()->wait();
    for (int q = 0; q < 3; ++q)
      for (int i = 0; i < 1024; ++i)
        ASSERT_EQ(bytes[q * 1024 + i], static_cast<unsigned char>(q + i)) << "member " << q;
    EXPECT_THROW(c.share_memory(0), InvalidArgument);
  });
  EXPECT_NE(regions[0].get(), regions[1].get());  // separate mappings of one memory
  EXPECT_EQ(dist_segments_in_dev_shm(), 0) << "a shared region's name was left in /dev/shm";
  regions.clear();
  release(members);
}

// Over TCP alone there is nothing to share: every member gets null and keeps its own copy.
TEST(SameHostCommunicatorTest, WithoutSharedMemoryEveryMemberGetsNull) {
  auto members = same_host_group(2, std::chrono::seconds(30), /*shared_memory=*/false);
  run_threads(
      2, [&](int r) { EXPECT_EQ(members[static_cast<size_t>(r)]->share_memory(4096), nullptr); });
  release(members);
}

}  // namespace
}  // namespace dist::collective
