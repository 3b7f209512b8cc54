// What the workers of an elastic job agree on through the rendezvous store
// (src/distribute/cluster/elastic_membership.h), with an in-process store: the survivors' next
// members, joiners admitted or refused, and generation-scoped keys that leave the heartbeat alone.
#include <gtest/gtest.h>

#include <future>

#include "collective/store/store_client.h"
#include "collective/store/store_server.h"
#include "dist/core/error.h"
#include "distribute/cluster/elastic_membership.h"

namespace dist::detail {
namespace {

using namespace std::chrono_literals;
using collective::StoreClient;
using collective::StoreServer;
using collective::to_bytes;

std::unique_ptr<ElasticMembership> member(const StoreServer& server, const std::string& name) {
  return std::make_unique<ElasticMembership>(server.address(), "", "", name, 10s);
}

const std::string kSettings = "--lr=0.001\n--global-batch=64\n";

TEST(ElasticMembershipTest, AScopedClientKeepsGenerationsApartButNotTheHeartbeat) {
  StoreServer server({"127.0.0.1", 0});
  StoreClient top(server.address(), 5s, "");
  StoreClient generation(server.address(), 5s, "", "generation/1/");
  generation.set("joined/worker:0", to_bytes("1"));
  generation.add("alive/worker:0", 1);
  EXPECT_TRUE(top.check({"generation/1/joined/worker:0"}));
  EXPECT_FALSE(top.check({"joined/worker:0"}));
  EXPECT_TRUE(top.check({"alive/worker:0"}));  // a process's key: the store's host watches it
  EXPECT_TRUE(generation.check({"joined/worker:0"}));
}

TEST(ElasticMembershipTest, SurvivorsAgreeOnTheMembersWhoseHeartbeatGoesOn) {
  StoreServer server({"127.0.0.1", 0});
  auto w0 = member(server, "worker:0");
  auto w1 = member(server, "worker:1");
  w0->start_heartbeat();
  w1->start_heartbeat();
  // worker:2 never beats (it was lost): after kGoneAfter it is left out.
  const std::vector<std::string> members{"worker:0", "worker:1", "worker:2"};
  auto first = std::async(std::launch::async, [&] { return w0->next_after_loss(0, members, 30s); });
  std::this_thread::sleep_for(500ms);  // worker:1 says it stays later, while worker:0 waits
  const auto second = w1->next_after_loss(0, members, 30s);
  const std::vector<std::string> expected{"worker:0", "worker:1"};
  EXPECT_EQ(first.get(), expected);
  EXPECT_EQ(second, expected);
}

TEST(ElasticMembershipTest, AJoinerIsAdmittedAtARegroupAndOneWithOtherSettingsAtOnceRefused) {
  StoreServer server({"127.0.0.1", 0});
  auto chief = member(server, "worker:0");
  chief->mark_running(0, 1);
  EXPECT_EQ(ElasticMembership::find_job(server.address(), "", "", 2s).state,
            ElasticMembership::FoundJob::State::kRunning);
  const std::vector<std::string> members{"worker:0"};
  EXPECT_FALSE(chief->join_requested(members, kSettings));
  auto other = member(server, "worker:2");
  const int64_t refused = other->ask_to_join("--lr=0.01\n--global-batch=64\n");
  auto joiner = member(server, "worker:1");
  const int64_t admitted = joiner->ask_to_join(kSettings);
  EXPECT_TRUE(chief->join_requested(members, kSettings));  // refuses worker:2 on the way
  try {
    other->await_admission(refused, 5s);
    FAIL() << "admitted with another --lr";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("its --lr is 0.01, the running job's is 0.001"),
              std::string::npos)
        << e.what();
  }
  const auto next = chief->admit_joiners(0, members, kSettings);
  EXPECT_EQ(next, (std::vector<std::string>{"worker:0", "worker:1"}));
  const auto admission = joiner->await_admission(admitted, 5s);
  EXPECT_EQ(admission.generation, 1);
  EXPECT_EQ(admission.members, next);
  EXPECT_EQ(admission.previous, members);
  EXPECT_EQ(chief->sizes(0), std::vector<int>{1});
}

TEST(ElasticMembershipTest, AJoinerNamedLikeAMemberWaitsUntilThatMemberIsGone) {
  StoreServer server({"127.0.0.1", 0});
  auto chief = member(server, "worker:0");
  auto again = member(server, "worker:1");  // started again before the loss was seen
  again->ask_to_join(kSettings);
  EXPECT_FALSE(chief->join_requested({"worker:0", "worker:1"}, kSettings));
  EXPECT_TRUE(chief->join_requested({"worker:0"}, kSettings));
}

// A joiner still waiting when the job ends is answered by the end, not left to its timeout.
TEST(ElasticMembershipTest, AJoinerWaitingWhenTheJobFinishesLearnsIt) {
  StoreServer server({"127.0.0.1", 0});
  auto chief = member(server, "worker:0");
  chief->mark_running(0, 1);
  auto joiner = member(server, "worker:1");
  const int64_t ticket = joiner->ask_to_join(kSettings);
  EXPECT_FALSE(joiner->finished());
  chief->mark_finished("at step 40");
  const auto start = std::chrono::steady_clock::now();
  const auto admission = joiner->await_admission(ticket, 5s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(admission.finished, std::optional<std::string>("at step 40"));
  EXPECT_TRUE(admission.members.empty());
}

// What a worker that starts finds at the store's address (issue 55): its own job ended only when
// the store has its identity; a job that ended, a closing store, or another job's store is a
// previous job's leftovers, never a job to join or a reason to do nothing.
TEST(ElasticMembershipTest, AWorkerTellsItsOwnJobsEndFromAPreviousJobsLeftovers) {
  using State = ElasticMembership::FoundJob::State;
  const auto find = [](const StoreServer& server, const std::string& job_id) {
    return ElasticMembership::find_job(server.address(), "", job_id, 2s);
  };
  StoreServer by_hand({"127.0.0.1", 0});  // workers started without a job identity
  ElasticMembership(by_hand.address(), "", "", "worker:0", 5s).mark_finished("at step 10");
  const auto found = find(by_hand, "");
  EXPECT_EQ(found.state, State::kEnded);
  EXPECT_EQ(found.how, "at step 10");
  EXPECT_FALSE(found.same_job);  // a rerun by hand trains, it does not do nothing

  StoreServer launched({"127.0.0.1", 0}, "", "launch-1.0");
  ElasticMembership(launched.address(), "", "launch-1.0", "worker:0", 5s)
      .mark_stopped("lost worker:1");
  const auto own = find(launched, "launch-1.0");  // a worker of that job, started again
  EXPECT_EQ(own.state, State::kEnded);
  EXPECT_TRUE(own.stopped);
  EXPECT_TRUE(own.same_job);
  EXPECT_EQ(find(launched, "launch-2.0").state, State::kAnother);  // the next launch's

  StoreServer running({"127.0.0.1", 0}, "", "launch-3.0");
  ElasticMembership(running.address(), "", "launch-3.0", "worker:0", 5s).mark_running(0, 2);
  EXPECT_EQ(find(running, "launch-3.0").state, State::kRunning);
  EXPECT_EQ(find(running, "launch-4.0").state, State::kAnother);
  running.set("closing", "1");  // every worker lost: its host closes it
  EXPECT_EQ(find(running, "launch-3.0").state, State::kAnother);
}

// A joiner whose job lost every worker (its store closes) starts the job anew.
TEST(ElasticMembershipTest, AJoinerWhoseJobIsGoneLearnsIt) {
  StoreServer server({"127.0.0.1", 0});
  member(server, "worker:0")->mark_running(0, 1);
  auto joiner = member(server, "worker:1");
  const int64_t ticket = joiner->ask_to_join(kSettings);
  server.set("closing", "1");
  const auto admission = joiner->await_admission(ticket, 5s);
  EXPECT_TRUE(admission.job_gone);
  EXPECT_FALSE(admission.finished);
}

}  // namespace
}  // namespace dist::detail
