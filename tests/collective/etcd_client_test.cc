// EtcdClient against a real etcd cluster of three members on loopback (tests/collective/
// etcd_cluster.h): the calls the etcd rendezvous makes, and what the loss of one member and of a
// quorum does to them.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "collective/etcd/etcd_client.h"
#include "collective/etcd_cluster.h"
#include "dist/core/error.h"
#include "expect_error.h"

namespace dist::collective::etcd {
namespace {

using namespace std::chrono_literals;
using dist::testing::EtcdCluster;

#define MAKE_ETCD(cluster, members) \
  EtcdCluster cluster(members);     \
  if (!cluster.available()) GTEST_SKIP() << cluster.why()

EtcdOptions etcd_options_of(const EtcdCluster& cluster) {
  EtcdOptions options;
  options.members = cluster.clients();
  options.member_timeout = 1s;
  options.call_timeout = 8s;
  return options;
}

TEST(EtcdClientTest, KeysArePutReadByPrefixAndErased) {
  MAKE_ETCD(cluster, 3);
  EtcdClient client(etcd_options_of(cluster));
  EXPECT_FALSE(client.get("job/a").has_value());
  const int64_t first = client.put("job/b", "two");
  const int64_t second = client.put("job/a", "one");
  EXPECT_GT(second, first);
  client.put("job0", "not under job/");
  client.put("jo", "not under job/ either");
  ASSERT_TRUE(client.get("job/a").has_value());
  EXPECT_EQ(client.get("job/a")->value, "one");
  EXPECT_EQ(client.get("job/a")->mod_revision, second);
  const auto under = client.get_prefix("job/");
  ASSERT_EQ(under.size(), 2u);
  EXPECT_EQ(under[0].key, "job/a");  // in key order
  EXPECT_EQ(under[1].value, "two");
  EXPECT_TRUE(client.erase("job/a"));
  EXPECT_FALSE(client.erase("job/a"));
  EXPECT_EQ(client.erase_prefix("job/"), 1);
  EXPECT_TRUE(client.get_prefix("job/").empty());
  EXPECT_EQ(client.get("job0")->value, "not under job/");
}

TEST(EtcdClientTest, CompareAndSetAndAddAreAtomicUnderContention) {
  MAKE_ETCD(cluster, 3);
  EtcdClient client(etcd_options_of(cluster));
  const auto created = client.compare_and_set("k", std::nullopt, "first");
  EXPECT_TRUE(created.swapped);
  const auto again = client.compare_and_set("k", std::nullopt, "second");
  EXPECT_FALSE(again.swapped);
  EXPECT_EQ(again.value, "first");
  const auto wrong = client.compare_and_set("k", std::string("other"), "third");
  EXPECT_FALSE(wrong.swapped);
  EXPECT_EQ(wrong.value, "first");
  EXPECT_TRUE(client.compare_and_set("k", std::string("first"), "third").swapped);
  EXPECT_EQ(client.get("k")->value, "third");
  // Four clients (one per thread, as four workers) add 1 twenty-five times each to one counter:
  // every addition counts once.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      try {
        EtcdClient mine(etcd_options_of(cluster));
        for (int i = 0; i < 25; ++i) mine.add("counter", 1);
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(client.get("counter")->value, "100");
  EXPECT_EQ(client.add("counter", -40), 60);
  client.put("text", "abc");
  EXPECT_TRUE(dist::testing::contains(
      dist::testing::error_of<CollectiveError>([&] { client.add("text", 1); }), "not a counter"));
}

TEST(EtcdClientTest, WaitForSeesAKeyWrittenWhileItWaitsAndGivesUpAtItsTimeout) {
  MAKE_ETCD(cluster, 3);
  EtcdClient client(etcd_options_of(cluster));
  std::thread writer([&] {
    std::this_thread::sleep_for(300ms);
    EtcdClient other(etcd_options_of(cluster));
    other.put("later", "here");
  });
  const auto seen = client.wait_for("later", 20s);
  writer.join();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->value, "here");
  client.put("now", "at once");
  EXPECT_EQ(client.wait_for("now", 0ms)->value, "at once");
  EXPECT_FALSE(client.wait_for("never", 1500ms).has_value());
}

// A lease not kept alive takes its keys with it: how a vanished member's key goes.
TEST(EtcdClientTest, ALeaseKeptAliveKeepsItsKeyAndOneLeftAloneTakesItsKeyWithIt) {
  MAKE_ETCD(cluster, 3);
  EtcdClient client(etcd_options_of(cluster));
  const int64_t lease = client.grant_lease(2s);
  client.put("alive/worker:0", "1", lease);
  EXPECT_EQ(client.get("alive/worker:0")->lease, lease);
  for (int i = 0; i < 6; ++i) {  // 3 s, beyond the TTL, kept alive every half second
    std::this_thread::sleep_for(500ms);
    EXPECT_TRUE(client.keep_alive(lease));
  }
  EXPECT_TRUE(client.get("alive/worker:0").has_value());
  // etcd expires a lease within its TTL plus its own check interval (500 ms): up to 10 s here.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::this_thread::sleep_for(100ms);
    gone = !client.get("alive/worker:0").has_value();
  }
  EXPECT_TRUE(gone);
  EXPECT_FALSE(client.keep_alive(lease));
  const int64_t revoked = client.grant_lease(30s);
  client.put("left/worker:1", "1", revoked);
  client.revoke_lease(revoked);
  EXPECT_FALSE(client.get("left/worker:1").has_value());
  client.revoke_lease(revoked);  // again: already gone, no error
}

TEST(EtcdClientTest, TheLossOfOneMemberOfThreeChangesNoCall) {
  MAKE_ETCD(cluster, 3);
  EtcdClient client(etcd_options_of(cluster));
  client.put("before", "1");
  cluster.kill(0);  // the member the client asked first
  EXPECT_EQ(client.get("before")->value, "1");
  client.put("after", "2");
  EXPECT_EQ(client.add("n", 5), 5);
  EXPECT_EQ(client.get_prefix("after").size(), 1u);
  cluster.restart(0);
  EtcdOptions only_the_restarted = etcd_options_of(cluster);
  only_the_restarted.members = {cluster.clients()[0]};
  only_the_restarted.call_timeout = 30s;
  EtcdClient restarted(only_the_restarted);
  EXPECT_EQ(restarted.get("after")->value, "2") << cluster.output();
}

TEST(EtcdClientTest, TheLossOfAQuorumIsANamedErrorWithinTheCallTimeout) {
  MAKE_ETCD(cluster, 3);
  EtcdOptions options = etcd_options_of(cluster);
  options.call_timeout = 3s;
  EtcdClient client(options);
  client.put("k", "v");
  cluster.kill(1);
  cluster.kill(2);
  const std::string message =
      dist::testing::error_of<CollectiveError>([&] { client.put("k", "w"); });
  EXPECT_TRUE(dist::testing::contains(message, "quorum")) << message;
  EXPECT_TRUE(dist::testing::contains(message, cluster.clients()[2].to_string())) << message;
  EXPECT_TRUE(dist::testing::contains(message, "3000 ms")) << message;
  // The calls right after fail at once with the same error, not after another timeout each.
  const auto again = std::chrono::steady_clock::now();
  EXPECT_TRUE(dist::testing::contains(
      dist::testing::error_of<CollectiveError>([&] { client.get("k"); }), "quorum"));
  EXPECT_LT(std::chrono::steady_clock::now() - again, 500ms);
  // The quorum back (its members started again on their data): after the window, calls work.
  cluster.restart(1);
  cluster.restart(2);
  bool answered = false;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       !answered && std::chrono::steady_clock::now() < until;) {
    try {
      answered = client.get("k").has_value();  // "v", or "w" if the failed write was kept
    } catch (const CollectiveError&) {
      std::this_thread::sleep_for(500ms);
    }
  }
  EXPECT_TRUE(answered) << cluster.output();
}

TEST(EtcdClientTest, BadOptionsAreNamed) {
  EtcdOptions none;
  EXPECT_TRUE(
      dist::testing::contains(dist::testing::error_of<InvalidArgument>([&] { EtcdClient c(none); }),
                              "at least one etcd member"));
  EtcdOptions bad_port;
  bad_port.members = {{"127.0.0.1", 70000}};
  EXPECT_TRUE(dist::testing::contains(
      dist::testing::error_of<InvalidArgument>([&] { EtcdClient c(bad_port); }),
      "127.0.0.1:70000"));
  dist::testing::TempDir dir;
  EtcdOptions missing_ca;
  missing_ca.members = {{"127.0.0.1", 2379}};
  missing_ca.security.ca_file = dir.file("ca.pem");
  const std::string message =
      dist::testing::error_of<InvalidArgument>([&] { EtcdClient c(missing_ca); });
  EXPECT_TRUE(dist::testing::contains(message, "CA file")) << message;
  EXPECT_TRUE(dist::testing::contains(message, "missing")) << message;
  EtcdOptions half_a_certificate;
  half_a_certificate.members = {{"127.0.0.1", 2379}};
  half_a_certificate.security.ca_file = dir.file("ca.pem");
  dist::testing::write_file(dir.file("ca.pem"), "-----BEGIN CERTIFICATE-----\n");
  half_a_certificate.security.cert_file = dir.file("client.pem");
  EXPECT_TRUE(dist::testing::contains(
      dist::testing::error_of<InvalidArgument>([&] { EtcdClient c(half_a_certificate); }),
      "both its certificate and its key"));
  EXPECT_EQ(prefix_end("job/"), "job0");
  EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
}

}  // namespace
}  // namespace dist::collective::etcd
