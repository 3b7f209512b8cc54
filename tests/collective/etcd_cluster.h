// A real etcd cluster for tests: Debian's etcd (package etcd-server) started as `members`
// processes on free loopback ports, each with a data directory of its own under a temporary
// folder; killed and reaped on destruction, so no member outlives its test. With
// EtcdClusterOptions::tls the members take clients over TLS only, from clients whose certificate
// their CA signed (a CA, server and client certificates made with the openssl CLI).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "collective/etcd/etcd_client.h"
#include "dist/core/host_port.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::testing {

struct EtcdClusterOptions {
  // Client URLs on https, with --client-cert-auth: a client needs the CA (ca_file()) and a
  // certificate it signed (client_cert_file(), client_key_file()). Peers stay on http.
  bool tls = false;
  // etcd's --auth-token-ttl: how long an authentication token lives unused; 0: etcd's 300 s.
  int auth_token_ttl_seconds = 0;
};

// One etcd member as its command line names it.
struct EtcdMember {
  std::string name;  // "m0"
  std::string data_dir;
  std::string log;              // where etcd writes its log
  std::string peer_url;         // "http://127.0.0.1:2380"
  std::string client_url;       // "http://127.0.0.1:2379" (https with TLS)
  std::string initial_cluster;  // "m0=http://...,m1=http://..."
  std::string state;            // "new", or "existing" for a member started again
  std::string cluster_token;    // --initial-cluster-token; empty: etcd's default
};

// etcd's arguments for `member` (without TLS).
std::vector<std::string> etcd_member_arguments(const EtcdMember& member);

class EtcdCluster {
 public:
  // Starts the members and waits (up to 30 s) until the cluster takes a write. `available()`
  // false, with `why()`, when etcd (or, for TLS, openssl) is not installed; throws Error when it
  // does not come up.
  explicit EtcdCluster(int members) : EtcdCluster(members, EtcdClusterOptions{}) {}
  EtcdCluster(int members, const EtcdClusterOptions& options);
  ~EtcdCluster() = default;
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool available() const { return !binary_.empty(); }
  const std::string& why() const { return why_; }
  // The members' client addresses, in member order.
  const std::vector<HostPort>& clients() const { return clients_; }
  // SIGKILLs member i (its process and nothing else).
  void kill(int i);
  // Starts member i again on its data directory; it rejoins the cluster.
  void restart(int i);
  // Every member's output so far, for a failed expectation.
  std::string output();

  // With TLS, the PEM files made for it: the CA the members trust, a client certificate it
  // signed and its key, and another CA that signed nothing of this cluster's.
  std::string ca_file() const { return dir_.file("ca.pem"); }
  std::string client_cert_file() const { return dir_.file("client.pem"); }
  std::string client_key_file() const { return dir_.file("client.key"); }
  std::string other_ca_file() const { return dir_.file("other-ca.pem"); }
  // What a client needs to be let in: with TLS, the CA and the client certificate; none else.
  collective::etcd::EtcdSecurity client_security() const;
  // Runs etcdctl (API v3) with `args` on every member, with the TLS files, for up to 20 s.
  ProcessResult etcdctl(const std::vector<std::string>& args) const;

 private:
  void start(int i, const std::string& state);
  void make_certificates();
  void openssl(const std::vector<std::string>& args);
  std::string scheme() const { return options_.tls ? "https://" : "http://"; }

  EtcdClusterOptions options_;
  std::string binary_;
  std::string why_;
  TempDir dir_;
  std::vector<HostPort> clients_;
  std::vector<int> peer_ports_;
  std::vector<size_t> process_of_;  // member -> index in processes_
  WorkerProcesses processes_;
};

}  // namespace dist::testing
