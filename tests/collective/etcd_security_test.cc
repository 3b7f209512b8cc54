// EtcdClient against a real etcd that requires what a production cluster does: TLS with client
// certificates (made with openssl by tests/collective/etcd_cluster.h) and etcd's own users with
// roles (set up with etcdctl), and the environment variables that configure both for a job.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <thread>

#include "collective/etcd/etcd_client.h"
#include "collective/etcd/etcd_connection.h"
#include "collective/etcd_cluster.h"
#include "dist/collective/rendezvous_address.h"
#include "dist/core/error.h"
#include "expect_error.h"

namespace dist::collective::etcd {
namespace {

using namespace std::chrono_literals;
using dist::testing::contains;
using dist::testing::EtcdCluster;
using dist::testing::EtcdClusterOptions;

#define MAKE_SECURE_ETCD(cluster, members, ...)                  \
  EtcdCluster cluster(members, EtcdClusterOptions{__VA_ARGS__}); \
  if (!cluster.available()) GTEST_SKIP() << cluster.why()

EtcdOptions secure_etcd_options_of(const EtcdCluster& cluster) {
  EtcdOptions options;
  options.members = cluster.clients();
  options.security = cluster.client_security();
  options.member_timeout = 1s;
  options.call_timeout = 5s;
  return options;
}

// etcdctl `args`, which must succeed.
void etcdctl_ok(const EtcdCluster& cluster, const std::vector<std::string>& args) {
  const dist::testing::ProcessResult result = cluster.etcdctl(args);
  ASSERT_EQ(result.exit_code, 0) << "etcdctl " << args.at(0) << ": " << result.output;
}

// The users of the authentication cases: root (etcd needs it to enable authentication) and
// "dist", whose role may read and write under /dist/ only.
void enable_etcd_users(const EtcdCluster& cluster) {
  etcdctl_ok(cluster, {"user", "add", "root:root-secret"});
  etcdctl_ok(cluster, {"user", "add", "dist:dist-secret"});
  etcdctl_ok(cluster, {"role", "add", "dist-job"});
  etcdctl_ok(cluster,
             {"role", "grant-permission", "--prefix=true", "dist-job", "readwrite", "/dist/"});
  etcdctl_ok(cluster, {"user", "grant-role", "dist", "dist-job"});
  etcdctl_ok(cluster, {"auth", "enable"});
}

// What the etcd rendezvous does with a cluster, once: every kind of call.
void expect_every_call_works(EtcdClient& client, const std::string& prefix) {
  client.put(prefix + "a", "one");
  ASSERT_TRUE(client.get(prefix + "a").has_value());
  EXPECT_EQ(client.get(prefix + "a")->value, "one");
  EXPECT_TRUE(client.compare_and_set(prefix + "a", std::string("one"), "two").swapped);
  EXPECT_FALSE(client.compare_and_set(prefix + "a", std::nullopt, "three").swapped);
  EXPECT_EQ(client.add(prefix + "n", 3), 3);
  EXPECT_EQ(client.get_prefix(prefix).size(), 2u);
  std::thread writer([&] {
    std::this_thread::sleep_for(300ms);
    client.put(prefix + "later", "here");
  });
  const auto seen = client.wait_for(prefix + "later", 10s);
  writer.join();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->value, "here");
  const int64_t lease = client.grant_lease(10s);
  client.put(prefix + "leased", "1", lease);
  EXPECT_TRUE(client.keep_alive(lease));
  client.revoke_lease(lease);
  EXPECT_FALSE(client.get(prefix + "leased").has_value());
  EXPECT_TRUE(client.erase(prefix + "a"));
  EXPECT_EQ(client.erase_prefix(prefix), 2);
}

TEST(EtcdSecurityTest, ATlsClusterThatRequiresClientCertificatesAnswersEveryCall) {
  MAKE_SECURE_ETCD(cluster, 3, true);
  EtcdClient client(secure_etcd_options_of(cluster));
  expect_every_call_works(client, "tls/");
  // A user for a cluster without authentication is a mistake worth naming, not ignoring.
  EtcdOptions with_user = secure_etcd_options_of(cluster);
  with_user.security.user = "dist";
  with_user.security.password = "dist-secret";
  EtcdClient user_client(with_user);
  const std::string message =
      dist::testing::error_of<CollectiveError>([&] { user_client.get("tls/a"); });
  EXPECT_TRUE(contains(message, "'dist'")) << message;
  EXPECT_TRUE(contains(message, "authentication is not enabled")) << message;
}

// The error a client that the members' TLS refuses gets: what was wrong, within the timeout.
std::string tls_refusal(const EtcdCluster& cluster, const EtcdSecurity& security) {
  EtcdOptions options = secure_etcd_options_of(cluster);
  options.security = security;
  EtcdClient client(options);
  const auto start = std::chrono::steady_clock::now();
  const std::string message =
      dist::testing::error_of<CollectiveError>([&] { client.put("tls/k", "v"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, options.call_timeout + 2s) << message;
  EXPECT_TRUE(contains(message, cluster.clients()[0].to_string())) << message;
  return message;
}

TEST(EtcdSecurityTest, AClientThatTheMembersTlsRefusesIsToldWhyWithinTheCallTimeout) {
  MAKE_SECURE_ETCD(cluster, 1, true);
  EtcdSecurity no_certificate = cluster.client_security();
  no_certificate.cert_file.clear();
  no_certificate.key_file.clear();
  const std::string without = tls_refusal(cluster, no_certificate);
  EXPECT_TRUE(contains(without, "TLS")) << without;
  EXPECT_TRUE(contains(without, "certificate")) << without;
  EtcdSecurity wrong_ca = cluster.client_security();
  wrong_ca.ca_file = cluster.other_ca_file();
  const std::string unknown = tls_refusal(cluster, wrong_ca);
  EXPECT_TRUE(contains(unknown, "TLS")) << unknown;
  EXPECT_TRUE(contains(unknown, cluster.other_ca_file())) << unknown;
  const std::string plain = tls_refusal(cluster, EtcdSecurity{});
  EXPECT_TRUE(contains(plain, "TLS")) << plain;
}

TEST(EtcdSecurityTest, AUserIsLetInWithItsPasswordAndOnlyUnderItsRolesPrefix) {
  MAKE_SECURE_ETCD(cluster, 3, true);
  enable_etcd_users(cluster);
  EtcdOptions options = secure_etcd_options_of(cluster);
  options.security.user = "dist";
  options.security.password = "dist-secret";
  EtcdClient client(options);
  expect_every_call_works(client, "/dist/job/");
  const std::string outside =
      dist::testing::error_of<CollectiveError>([&] { client.put("/other/k", "v"); });
  EXPECT_TRUE(contains(outside, "permission denied")) << outside;
  EXPECT_TRUE(contains(outside, "'dist'")) << outside;
  EXPECT_TRUE(contains(outside, "/other/k")) << outside;
  options.security.password = "wrong";
  EtcdClient wrong(options);
  const auto start = std::chrono::steady_clock::now();
  const std::string refused =
      dist::testing::error_of<CollectiveError>([&] { wrong.get("/dist/job/a"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, options.call_timeout) << refused;
  EXPECT_TRUE(contains(refused, "'dist'")) << refused;
  EXPECT_TRUE(contains(refused, "authentication failed")) << refused;
  EXPECT_TRUE(contains(refused, "password")) << refused;
  options.security.user.clear();  // the cluster wants a user: one without is told so
  EtcdClient anonymous(options);
  const std::string nobody =
      dist::testing::error_of<CollectiveError>([&] { anonymous.get("/dist/job/a"); });
  EXPECT_TRUE(contains(nobody, "user")) << nobody;
}

// etcd forgets a token unused for --auth-token-ttl: the client authenticates again.
TEST(EtcdSecurityTest, AnExpiredTokenIsRenewedWithoutTheCallerNoticing) {
  MAKE_SECURE_ETCD(cluster, 1, false, 1);
  enable_etcd_users(cluster);
  EtcdOptions options = secure_etcd_options_of(cluster);
  options.security.user = "dist";
  options.security.password = "dist-secret";
  EtcdClient client(options);
  client.put("/dist/k", "1");
  const int64_t lease = client.grant_lease(30s);
  std::this_thread::sleep_for(2500ms);  // the token expired (etcd checks every second)
  EXPECT_EQ(client.get("/dist/k")->value, "1");
  std::this_thread::sleep_for(2500ms);
  EXPECT_TRUE(client.keep_alive(lease));
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(client.add("/dist/n", 2), 2);
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(client.wait_for("/dist/n", 1s)->value, "2");
  // etcd did refuse an expired token (and the client then authenticated again).
  EXPECT_TRUE(contains(cluster.output(), "invalid auth token")) << cluster.output();
}

// A setenv for one test: unset again, whatever happens, since the client cache is per process.
class ScopedEtcdVariable {
 public:
  ScopedEtcdVariable(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEtcdVariable() { unsetenv(name_); }
  ScopedEtcdVariable(const ScopedEtcdVariable&) = delete;
  ScopedEtcdVariable& operator=(const ScopedEtcdVariable&) = delete;

 private:
  const char* name_;
};

// What a job's workers are given: TLS files and a user from the environment (the process-wide
// client is cached per member list: this cluster's ports are its own).
TEST(EtcdSecurityTest, TheEnvironmentGivesAJobsStoreItsTlsFilesAndUser) {
  MAKE_SECURE_ETCD(cluster, 1, true);
  enable_etcd_users(cluster);
  dist::testing::TempDir dir;
  dist::testing::write_file(dir.file("password"), "dist-secret\n");
  ScopedEtcdVariable ca("DIST_ETCD_CA_FILE", cluster.ca_file());
  ScopedEtcdVariable cert("DIST_ETCD_CERT_FILE", cluster.client_cert_file());
  ScopedEtcdVariable key("DIST_ETCD_KEY_FILE", cluster.client_key_file());
  ScopedEtcdVariable user("DIST_ETCD_USER", "dist");
  ScopedEtcdVariable password("DIST_ETCD_PASSWORD_FILE", dir.file("password"));
  const RendezvousAddress address =
      parse_rendezvous_address("etcd://" + cluster.clients()[0].to_string() + "/dist/env-job/");
  auto store = connect_to_etcd(address, 5s);
  store->set("k", {1, 2, 3});
  EXPECT_EQ(store->get("k"), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(store->add("n", 4), 4);
  EtcdOptions as_dist = secure_etcd_options_of(cluster);
  as_dist.security.user = "dist";
  as_dist.security.password = "dist-secret";
  EtcdClient dist_user(as_dist);
  EXPECT_EQ(dist_user.get_prefix("/dist/env-job/").size(), 2u);
}

// A password file that is a FIFO is refused by name, at once: reading it would block until a
// writer came (no etcd is needed: the file is read before any connection).
TEST(EtcdSecurityTest, APasswordFileThatIsAFifoIsRefusedWithoutWaiting) {
  dist::testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("password").c_str(), 0600), 0);
  ScopedEtcdVariable user("DIST_ETCD_USER", "dist");
  ScopedEtcdVariable password("DIST_ETCD_PASSWORD_FILE", dir.file("password"));
  const RendezvousAddress address = parse_rendezvous_address("etcd://127.0.0.1:1/dist/fifo/");
  const std::string message =
      dist::testing::error_of<InvalidArgument>([&] { connect_to_etcd(address, 1s); });
  EXPECT_TRUE(dist::testing::contains(
      message, "DIST_ETCD_PASSWORD_FILE '" + dir.file("password") + "' is a FIFO (named pipe)"))
      << message;
}

}  // namespace
}  // namespace dist::collective::etcd
