// Liveness (liveness.h) with a rendezvous store and no transport at all: the diagnosis of a
// failed collective is backend-neutral. Two members as threads of this test over loopback.
#include "collective/liveness.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "collective_test_util.h"

namespace dist::collective {
namespace {

using testing::run_threads;

struct Member {
  explicit Member(ProcessGroupSpec s) : spec(std::move(s)) {}
  ProcessGroupSpec spec;
  Rendezvous rendezvous{spec};
  Liveness liveness{rendezvous};
  bool closed = false;
};

// Two joined members; member 0 hosts the store (destroy member 1 first).
std::vector<std::unique_ptr<Member>> pair_of_members() {
  const auto ports = free_loopback_ports(2);
  std::vector<std::unique_ptr<Member>> members;
  for (int r = 0; r < 2; ++r) {
    members.push_back(
        std::make_unique<Member>(testing::loopback_spec(r, ports, std::chrono::seconds(10))));
    Member* m = members.back().get();
    m->liveness.set_close([m] { m->closed = true; });
  }
  run_threads(2, [&](int r) { members[static_cast<size_t>(r)]->rendezvous.join(); });
  return members;
}

void release(std::vector<std::unique_ptr<Member>>& members) {
  members[1].reset();
  members[0].reset();
}

// member 0's error when its collective #1 "all_reduce" fails.
std::string diagnosis_of_member_0(Member& m) {
  try {
    m.liveness.fail("all_reduce", 1, std::runtime_error("Connection closed by peer"));
  } catch (const CollectiveError& e) {
    return e.what();
  }
  return "";
}

TEST(LivenessTest, AMemberWhoseHeartbeatStoppedIsLost) {
  auto members = pair_of_members();
  members[1]->liveness.stop_heartbeat();
  members[0]->liveness.next_sequence();
  const std::string message = diagnosis_of_member_0(*members[0]);
  EXPECT_EQ(message.rfind("lost worker: worker:1 (127.0.0.1:", 0), 0u) << message;
  EXPECT_NE(message.find("stopped responding during all_reduce (seen by worker:0"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("Connection closed by peer"), std::string::npos) << message;
  EXPECT_TRUE(members[0]->closed);
  // The same member failing again says only that.
  try {
    members[0]->liveness.fail("barrier", 2, std::runtime_error("x"));
    ADD_FAILURE();
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("barrier on worker:0 (127.0.0.1:"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos);
  }
  EXPECT_THROW(members[0]->liveness.check_usable("all_reduce"), CollectiveError);
  release(members);
}

TEST(LivenessTest, AMemberThatAbortedIsNamedWithItsReason) {
  auto members = pair_of_members();
  members[1]->liveness.abort("cannot read its data directory");
  EXPECT_TRUE(members[1]->closed);
  const std::string message = diagnosis_of_member_0(*members[0]);
  EXPECT_EQ(message.rfind("worker:1 (127.0.0.1:", 0), 0u) << message;
  EXPECT_NE(message.find("failed: cannot read its data directory; worker:0 (127.0.0.1:"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("stops too (in all_reduce)"), std::string::npos) << message;
  release(members);
}

TEST(LivenessTest, ALiveMemberThatNeverIssuedTheCollectiveIsNamed) {
  auto members = pair_of_members();
  members[0]->liveness.next_sequence();                         // member 1 issued nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // its count is published
  const std::string message = diagnosis_of_member_0(*members[0]);
  EXPECT_EQ(message.rfind("collective timeout: worker:1 (127.0.0.1:", 0), 0u) << message;
  EXPECT_NE(message.find("(issued 0) did not reach all_reduce (collective #1)"), std::string::npos)
      << message;
  release(members);
}

}  // namespace
}  // namespace dist::collective
