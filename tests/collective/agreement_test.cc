// The agreement before each collective (agreement.h) over an in-process transport: it needs no
// backend of its own.
#include "collective/agreement.h"

#include <gtest/gtest.h>

#include "collective/local/local_communicator.h"
#include "collective_test_util.h"
#include "local_transport.h"

namespace dist::collective {
namespace {

using testing::LocalTransport;
using testing::run_threads;

ProcessGroupSpec spec_of(int size, int rank) {
  ProcessGroupSpec spec;
  spec.rank = rank;
  for (int r = 0; r < size; ++r)
    spec.members.push_back({"worker:" + std::to_string(r), {"10.0.0." + std::to_string(r), 2222}});
  return spec;
}

// What each of `size` members gets from disagreement() when member r issues fingerprints[r].
std::vector<std::string> agree(const std::vector<Fingerprint>& fingerprints) {
  const int size = static_cast<int>(fingerprints.size());
  LocalGroupOptions options;
  options.size = size;
  auto members = make_local_group(options);
  std::vector<std::string> verdicts(fingerprints.size());
  run_threads(size, [&](int r) {
    LocalTransport transport(*members[static_cast<size_t>(r)]);
    verdicts[static_cast<size_t>(r)] =
        disagreement(transport, spec_of(size, r), 7, fingerprints[static_cast<size_t>(r)]);
  });
  return verdicts;
}

TEST(AgreementTest, MembersThatIssueTheSameCollectiveAgree) {
  for (int size : {1, 2, 3, 5}) {
    const Fingerprint same{all_reduce_kind(ReduceOp::kSum), 1000, 6, 2};
    for (const auto& verdict : agree(std::vector<Fingerprint>(static_cast<size_t>(size), same)))
      EXPECT_EQ(verdict, "");
  }
}

TEST(AgreementTest, EveryMemberNamesWhatEachIssued) {
  const auto verdicts = agree({{all_reduce_kind(ReduceOp::kSum), 4, 4, 1},
                               {all_reduce_kind(ReduceOp::kSum), 4, 4, 1},
                               {reduce_scatter_kind(ReduceOp::kMax), 4, 4, 2}});
  const std::string expected =
      "collective mismatch at collective #7: worker:0 (10.0.0.0:2222) issued all_reduce SUM of 4 "
      "Long values in 1 tensor, worker:1 (10.0.0.1:2222) issued all_reduce SUM of 4 Long values "
      "in 1 tensor, worker:2 (10.0.0.2:2222) issued reduce_scatter MAX of 4 Long values in 2 "
      "rows; the workers are running different steps (different settings, data or code): start "
      "every worker with the same settings";
  for (const auto& verdict : verdicts) EXPECT_EQ(verdict, expected);
}

// Two fields that differ in opposite directions on two members still differ.
TEST(AgreementTest, DifferencesInOppositeDirectionsAreSeen) {
  const auto verdicts = agree({{kBarrierKind, 0, 0, 0}, {kAllGatherKind, 5, 6, 1}});
  for (const auto& verdict : verdicts)
    EXPECT_NE(verdict.find("issued barrier, worker:1"), std::string::npos) << verdict;
}

// The agreement is a sum: fields whose sums over the members match, but not their values (9 and
// 11 against 10 and 10; a field that differs in one bit of its top 16), still differ, and every
// member says so.
TEST(AgreementTest, FieldsWithEqualSumsButDifferentValuesDiffer) {
  const int64_t top_bit = int64_t{1} << 62;
  const std::vector<std::vector<Fingerprint>> cases = {
      {{kAllGatherKind, 9, 6, 1},
       {kAllGatherKind, 11, 6, 1},
       {kAllGatherKind, 10, 6, 1},
       {kAllGatherKind, 10, 6, 1}},
      {{kAllGatherKind, top_bit, 6, 1}, {kAllGatherKind, 0, 6, 1}}};
  for (const auto& fingerprints : cases)
    for (const auto& verdict : agree(fingerprints))
      EXPECT_NE(verdict.find("collective mismatch at collective #7"), std::string::npos) << verdict;
}

// A sum of a few int64 values travels inside the agreement: one all-reduce gives the verdict and
// the sums.
TEST(AgreementTest, SmallIntegerSumsTravelInsideTheAgreement) {
  const int size = 3;
  LocalGroupOptions options;
  options.size = size;
  auto members = make_local_group(options);
  run_threads(size, [&](int r) {
    LocalTransport transport(*members[static_cast<size_t>(r)]);
    const at::Tensor mine = at::tensor({int64_t{r + 1}, int64_t{10 * (r + 1)}}, at::kLong);
    Agreement agreement(3, {all_reduce_kind(ReduceOp::kSum), 2, 4, 1}, mine);
    agreement.start(transport)->wait();
    EXPECT_EQ(agreement.disagreement(transport, spec_of(size, r)), "");
    EXPECT_TRUE(at::equal(agreement.payload_sum(), at::tensor({int64_t{6}, int64_t{60}})));
  });
}

// Groups of more than 16 members: a broadcast from any root stays a broadcast from that root,
// apart from every other collective.
TEST(AgreementTest, BroadcastKindsOfEveryRootStayApartFromOtherCollectives) {
  const std::vector<int64_t> others{all_reduce_kind(ReduceOp::kSum),
                                    all_reduce_kind(ReduceOp::kMax),
                                    kAllGatherSizesKind,
                                    kAllGatherKind,
                                    kBarrierKind,
                                    reduce_scatter_kind(ReduceOp::kSum),
                                    reduce_scatter_kind(ReduceOp::kMax)};
  for (int root = 0; root < 100; ++root) {
    const Fingerprint broadcast{broadcast_kind(root), 4, 6, 1};
    EXPECT_EQ(describe(broadcast).rfind("broadcast from rank " + std::to_string(root) + " of", 0),
              0u)
        << describe(broadcast);
    for (int64_t other : others) EXPECT_NE(broadcast_kind(root), other) << "root " << root;
  }
}

}  // namespace
}  // namespace dist::collective
