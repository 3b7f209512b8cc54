// What a member reads of an etcd prefix before it joins (etcd_claim.h), against a real etcd on
// loopback while another client erases a previous job's keys, as a chief claiming the prefix
// does.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "collective/etcd/etcd_claim.h"
#include "collective/etcd/etcd_connection.h"
#include "collective/etcd_cluster.h"

namespace dist::collective::etcd {
namespace {

using namespace std::chrono_literals;

// worker:1 of a two-worker elastic job's generation 0, meeting under `prefix`.
ProcessGroupSpec second_worker(const dist::testing::EtcdCluster& cluster,
                               const std::string& prefix) {
  ProcessGroupSpec spec;
  spec.rank = 1;
  spec.members = {{"worker:0", {"127.0.0.1", 1}}, {"worker:1", {"127.0.0.1", 2}}};
  spec.rendezvous = RendezvousAddress{cluster.clients(), prefix};
  spec.elastic_generation = 0;
  return spec;
}

// A previous job of the same identity (none: DIST_JOB_ID unset, as in a job started again)
// left its "job" key and worker:1's "joined" key. Read key by key, worker:1 could see that job
// before a chief erased it and its own "joined" key gone after, and join: the chief then took
// the prefix for the previous job's, still beating (worker:1's beat), and each waited for the
// other until the rendezvous timeout. One snapshot sees the job with the key, or neither.
TEST(EtcdClaimTest, AMemberNeverSeesAPreviousJobHalfErased) {
  dist::testing::EtcdCluster cluster(1);
  if (!cluster.available()) GTEST_SKIP() << cluster.why();
  const std::string prefix = "/dist/claim-" + std::to_string(::getpid()) + "/";
  const ProcessGroupSpec spec = second_worker(cluster, prefix);
  EtcdClient& client = *shared_etcd_client(spec.rendezvous);
  const std::string joined = prefix + "generation/0/joined/worker:1";

  std::atomic<bool> done{false};
  std::thread chief([&] {
    while (!done) {
      client.put(joined, "1");  // before "job": no moment holds the job without the key
      client.put(prefix + kJobKey, "");
      client.erase_prefix(prefix);
    }
  });
  int previous_job = 0, unclaimed = 0, half_erased = 0, torn_key_by_key = 0;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while ((previous_job < 50 || unclaimed < 50) && std::chrono::steady_clock::now() < until) {
    const JoinView view = view_before_joining(spec);
    if (!view.unclaimed.empty())
      ++unclaimed;
    else if (view.self_joined)
      ++previous_job;
    else
      ++half_erased;
    // The reads as they were, one key after the other: seen for the record, not asserted.
    if (client.get(prefix + kJobKey) && !client.get(joined)) ++torn_key_by_key;
  }
  done = true;
  chief.join();
  std::printf(
      "snapshots: %d of the previous job, %d of no job, %d half-erased; key by key: %d "
      "half-erased\n",
      previous_job, unclaimed, half_erased, torn_key_by_key);
  EXPECT_EQ(half_erased, 0);
  // Both states were read, so the snapshots met the erasing chief.
  EXPECT_GE(previous_job, 50);
  EXPECT_GE(unclaimed, 50);
}

// The view names what keeps the member out: no job, another identity's job, a chief listed as
// joined that does not beat, its own "joined" key of the group's scope (a previous run's), the
// closing key; and nothing once the prefix is this job's.
TEST(EtcdClaimTest, TheViewNamesWhatKeepsAMemberOut) {
  dist::testing::EtcdCluster cluster(1);
  if (!cluster.available()) GTEST_SKIP() << cluster.why();
  const std::string prefix = "/dist/view-" + std::to_string(::getpid()) + "/";
  ProcessGroupSpec spec = second_worker(cluster, prefix);
  spec.job_id = "job-b";
  EtcdClient& client = *shared_etcd_client(spec.rendezvous);

  EXPECT_NE(view_before_joining(spec).unclaimed.find("no job holds"), std::string::npos);
  client.put(prefix + kJobKey, "job-a");
  EXPECT_NE(view_before_joining(spec).unclaimed.find("holds the job 'job-a', not 'job-b'"),
            std::string::npos);
  client.put(prefix + kJobKey, "job-b");
  JoinView view = view_before_joining(spec);
  EXPECT_EQ(view.unclaimed, "");
  EXPECT_FALSE(view.self_joined);
  EXPECT_FALSE(view.closing);
  // The chief listed as joined without a heartbeat: a previous run's, which ended before
  // worker:1 joined it (no "joined" key of worker:1 to tell it by).
  client.put(prefix + "generation/0/joined/worker:0", "1");
  EXPECT_NE(
      view_before_joining(spec).unclaimed.find("lists worker:0 as joined but nothing of it beats"),
      std::string::npos);
  client.put(prefix + "alive/worker:0", "1");  // this run's chief: it beats before it joins
  EXPECT_EQ(view_before_joining(spec).unclaimed, "");
  client.put(prefix + "generation/1/joined/worker:1", "1");  // another generation's: not its
  EXPECT_FALSE(view_before_joining(spec).self_joined);
  client.put(prefix + "generation/0/joined/worker:1", "1");
  EXPECT_TRUE(view_before_joining(spec).self_joined);
  client.put(prefix + "closing", "1");
  EXPECT_TRUE(view_before_joining(spec).closing);
}

}  // namespace
}  // namespace dist::collective::etcd
