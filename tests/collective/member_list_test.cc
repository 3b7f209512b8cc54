// dist-store-host's --members value: runs of one task type's indices as ranges, so that a
// 20,000-task job's command line stays short; the expansion gives back the same names in order.
#include "collective/store/member_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

TEST(MemberListTest, RunsOfIndicesBecomeRangesAndComeBackInOrder) {
  const std::vector<std::string> small = {"chief:0", "worker:0", "worker:1", "worker:2",
                                          "ps:0",    "worker:4", "odd-name", "worker:07"};
  EXPECT_EQ(compact_member_list(small), "chief:0,worker:0-2,ps:0,worker:4,odd-name,worker:07");
  EXPECT_EQ(expand_member_list(compact_member_list(small)), small);
  EXPECT_TRUE(expand_member_list("").empty());

  std::vector<std::string> slurm_job = {"chief:0"};
  for (int i = 0; i < 20000; ++i) slurm_job.push_back("worker:" + std::to_string(i));
  const std::string compact = compact_member_list(slurm_job);
  EXPECT_EQ(compact, "chief:0,worker:0-19999");
  EXPECT_EQ(expand_member_list(compact), slurm_job);
}

TEST(MemberListTest, ABackwardOrHugeRangeIsRefused) {
  EXPECT_THROW(expand_member_list("worker:5-2"), InvalidArgument);
  EXPECT_THROW(expand_member_list("worker:0-99999999"), InvalidArgument);
  EXPECT_EQ(expand_member_list("a-b,worker:x-3"), (std::vector<std::string>{"a-b", "worker:x-3"}));
}

}  // namespace
}  // namespace dist::collective
