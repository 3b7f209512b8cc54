// What the workers of an elastic job agree on through the rendezvous store
// (src/distribute/cluster/elastic_membership.h), on both backends: the built-in store in this
// process, and a real three-member etcd on loopback (one cluster for the suite, a prefix per
// store). The survivors' next members, joiners admitted or refused, what a starting worker
// finds, and generation-scoped keys that leave the heartbeat alone.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <list>

#include "collective/etcd/etcd_claim.h"
#include "collective/etcd/etcd_connection.h"
#include "collective/etcd_cluster.h"
#include "collective/store/store_client.h"
#include "collective/store/store_server.h"
#include "dist/core/error.h"
#include "distribute/cluster/elastic_membership.h"

namespace dist::detail {
namespace {

using namespace std::chrono_literals;
using collective::JobStoreAddress;
using collective::StoreServer;
using collective::to_bytes;

// A new, empty store of a job of identity `job_id` on each call, on one backend.
class MembershipBackend {
 public:
  virtual ~MembershipBackend() = default;
  virtual JobStoreAddress store(const std::string& job_id) = 0;
  // Says that the job's store is closing (every worker of it lost), as its host would.
  virtual void close(const JobStoreAddress& store) = 0;
};

class BuiltInMembership : public MembershipBackend {
 public:
  JobStoreAddress store(const std::string& job_id) override {
    servers_.emplace_back(HostPort{"127.0.0.1", 0}, "", job_id);
    return {servers_.back().address(), {}, "", job_id};
  }
  void close(const JobStoreAddress& store) override {
    for (auto& server : servers_)
      if (server.address().port == store.store.port) server.set("closing", "1");
  }

 private:
  std::list<StoreServer> servers_;
};

// Its prefixes as the chief of a job of that identity claims them (etcd_claim.h).
class EtcdMembership : public MembershipBackend {
 public:
  explicit EtcdMembership(const dist::testing::EtcdCluster& cluster) : cluster_(cluster) {}
  JobStoreAddress store(const std::string& job_id) override {
    static std::atomic<int> prefixes{0};
    RendezvousAddress address{cluster_.clients(), "/dist/membership-" + std::to_string(::getpid()) +
                                                      "-" + std::to_string(prefixes++) + "/"};
    collective::etcd::shared_etcd_client(address)->put(
        address.etcd_prefix + collective::etcd::kJobKey, job_id);
    return {{}, address, "", job_id};
  }
  void close(const JobStoreAddress& store) override {
    collective::etcd::shared_etcd_client(store.rendezvous)
        ->put(store.rendezvous.etcd_prefix + "closing", "1");
  }

 private:
  const dist::testing::EtcdCluster& cluster_;
};

class ElasticMembershipTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { etcd_ = new dist::testing::EtcdCluster(3); }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (GetParam() == "BuiltIn") {
      backend_ = std::make_unique<BuiltInMembership>();
    } else {
      if (!etcd_->available()) GTEST_SKIP() << etcd_->why();
      backend_ = std::make_unique<EtcdMembership>(*etcd_);
    }
  }
  MembershipBackend& backend() { return *backend_; }
  std::unique_ptr<ElasticMembership> member(const JobStoreAddress& store, const std::string& name) {
    return std::make_unique<ElasticMembership>(store, name, 10s);
  }

 private:
  static dist::testing::EtcdCluster* etcd_;
  std::unique_ptr<MembershipBackend> backend_;
};

dist::testing::EtcdCluster* ElasticMembershipTest::etcd_ = nullptr;

const std::string kSettings = "--lr=0.001\n--global-batch=64\n";

TEST_P(ElasticMembershipTest, AScopedClientKeepsGenerationsApartButNotTheHeartbeat) {
  const JobStoreAddress store = backend().store("");
  auto top = collective::connect_to_job_store(store, 5s);
  auto generation = collective::connect_to_job_store(store, 5s, "generation/1/");
  generation->set("joined/worker:0", to_bytes("1"));
  generation->add("alive/worker:0", 1);
  EXPECT_TRUE(top->check({"generation/1/joined/worker:0"}));
  EXPECT_FALSE(top->check({"joined/worker:0"}));
  EXPECT_TRUE(top->check({"alive/worker:0"}));  // a process's key: the whole job watches it
  EXPECT_TRUE(generation->check({"joined/worker:0"}));
}

TEST_P(ElasticMembershipTest, SurvivorsAgreeOnTheMembersWhoseHeartbeatGoesOn) {
  const JobStoreAddress store = backend().store("");
  auto w0 = member(store, "worker:0");
  auto w1 = member(store, "worker:1");
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

TEST_P(ElasticMembershipTest, AJoinerIsAdmittedAtARegroupAndOneWithOtherSettingsAtOnceRefused) {
  const JobStoreAddress store = backend().store("");
  auto chief = member(store, "worker:0");
  chief->start_heartbeat();  // a running job beats (on etcd, a job that does not is over)
  chief->mark_running(0, 1);
  EXPECT_EQ(ElasticMembership::find_job(store, 2s).state,
            ElasticMembership::FoundJob::State::kRunning);
  const std::vector<std::string> members{"worker:0"};
  EXPECT_FALSE(chief->join_requested(members, kSettings));
  auto other = member(store, "worker:2");
  const int64_t refused = other->ask_to_join("--lr=0.01\n--global-batch=64\n");
  auto joiner = member(store, "worker:1");
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

TEST_P(ElasticMembershipTest, AJoinerNamedLikeAMemberWaitsUntilThatMemberIsGone) {
  const JobStoreAddress store = backend().store("");
  auto chief = member(store, "worker:0");
  auto again = member(store, "worker:1");  // started again before the loss was seen
  again->ask_to_join(kSettings);
  EXPECT_FALSE(chief->join_requested({"worker:0", "worker:1"}, kSettings));
  EXPECT_TRUE(chief->join_requested({"worker:0"}, kSettings));
}

// A joiner still waiting when the job ends is answered by the end, not left to its timeout.
TEST_P(ElasticMembershipTest, AJoinerWaitingWhenTheJobFinishesLearnsIt) {
  const JobStoreAddress store = backend().store("");
  auto chief = member(store, "worker:0");
  chief->mark_running(0, 1);
  auto joiner = member(store, "worker:1");
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
TEST_P(ElasticMembershipTest, AWorkerTellsItsOwnJobsEndFromAPreviousJobsLeftovers) {
  using State = ElasticMembership::FoundJob::State;
  const auto find = [](JobStoreAddress store, const std::string& job_id) {
    store.job_id = job_id;
    return ElasticMembership::find_job(store, 2s);
  };
  const JobStoreAddress by_hand = backend().store("");  // workers started without an identity
  ElasticMembership(by_hand, "worker:0", 5s).mark_finished("at step 10");
  const auto found = find(by_hand, "");
  EXPECT_EQ(found.state, State::kEnded);
  EXPECT_EQ(found.how, "at step 10");
  EXPECT_FALSE(found.same_job);  // a rerun by hand trains, it does not do nothing

  const JobStoreAddress launched = backend().store("launch-1.0");
  ElasticMembership(launched, "worker:0", 5s).mark_stopped("lost worker:1");
  const auto own = find(launched, "launch-1.0");  // a worker of that job, started again
  EXPECT_EQ(own.state, State::kEnded);
  EXPECT_TRUE(own.stopped);
  EXPECT_TRUE(own.same_job);
  EXPECT_EQ(find(launched, "launch-2.0").state, State::kAnother);  // the next launch's

  const JobStoreAddress running = backend().store("launch-3.0");
  ElasticMembership chief(running, "worker:0", 5s);
  chief.start_heartbeat();
  chief.mark_running(0, 2);
  EXPECT_EQ(find(running, "launch-3.0").state, State::kRunning);
  EXPECT_EQ(find(running, "launch-4.0").state, State::kAnother);
  backend().close(running);  // every worker lost: its host closes it
  EXPECT_EQ(find(running, "launch-3.0").state, State::kAnother);
}

// On etcd nobody closes a job whose every worker vanished: its heartbeats' leases expire, and a
// worker that starts then finds no running job, only a previous one's keys.
TEST_P(ElasticMembershipTest, AJobWhoseEveryHeartbeatStoppedIsNotRunning) {
  if (GetParam() == "BuiltIn") GTEST_SKIP() << "its host closes the store (rendezvous_store.h)";
  using State = ElasticMembership::FoundJob::State;
  const JobStoreAddress store = backend().store("launch-5.0");
  {
    ElasticMembership chief(store, "worker:0", 5s);
    chief.start_heartbeat();
    chief.mark_running(0, 1);
    EXPECT_EQ(ElasticMembership::find_job(store, 2s).state, State::kRunning);
    // Gone without a word (its lease would run out kHeartbeatLease after its last beat; here its
    // store revokes the lease as the membership ends, and nothing is recorded under left/).
  }
  EXPECT_EQ(ElasticMembership::find_job(store, 2s).state, State::kAnother);
}

INSTANTIATE_TEST_SUITE_P(Backends, ElasticMembershipTest, ::testing::Values("BuiltIn", "Etcd"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dist::detail
