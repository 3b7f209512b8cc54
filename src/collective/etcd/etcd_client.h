// EtcdClient: the calls of etcd's v3 API that the etcd rendezvous needs, over gRPC
// (etcd_rpc.proto), to a cluster of several members.
//
// Every call goes to one member at a time: a member that does not answer (down, or without a
// leader because its cluster lost its quorum) within the call's timeout is left for the next
// one, until the call's deadline; then CollectiveError names every member and what the last
// attempt met; the calls within the next `call_timeout` then fail at once with that error
// rather than each waiting it out (a job that lost its quorum stops in one timeout, not in one
// per call). Reads are linearizable (the leader confirms them), so a member cut off from the
// quorum cannot answer with old values.
//
// Security (EtcdSecurity): TLS with the user's CA and client certificate, and etcd's users, whose
// token is renewed when etcd forgets it. A user etcd refuses (a wrong password, a key outside its
// roles' permissions) is a CollectiveError naming the user at once; a handshake every member
// refuses names TLS and the files to check, and connections the members close before answering
// (a client certificate refused) are named as a possible TLS refusal at the call's timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/core/host_port.h"

namespace dist::collective::etcd {

// What the user configures for a cluster that requires it (etcd's own TLS and authentication).
struct EtcdSecurity {
  // PEM files: the CA that signed the members' certificates (TLS on when set), and this
  // client's certificate and key when the members ask for one.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // etcd's user and password (Authenticate), when the cluster has authentication enabled.
  std::string user;
  std::string password;
};

struct EtcdOptions {
  std::vector<HostPort> members;
  EtcdSecurity security;
  // How long one member may take to answer one call before the next member is asked.
  std::chrono::milliseconds member_timeout{2000};
  // How long a call may take across every member.
  std::chrono::milliseconds call_timeout{10000};
};

struct EtcdValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  // Checks the options (InvalidArgument: no member, a port out of range, a security file that
  // cannot be read); connects lazily, on the first call.
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  std::optional<EtcdValue> get(const std::string& key);
  // Every key that starts with `prefix`, in key order.
  std::vector<EtcdValue> get_prefix(const std::string& prefix);
  // Sets `key`; `lease` 0: none. Returns the cluster's revision after the write.
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);
  struct Swap {
    bool swapped = false;
    std::optional<std::string> value;  // after the call: `desired` if swapped; none: absent
  };
  // Sets `key` to `desired` only if its value is `expected` (std::nullopt: only if it does not
  // exist), in one transaction; a new value is put with `lease` (0: none).
  Swap compare_and_set(const std::string& key, const std::optional<std::string>& expected,
                       const std::string& desired, int64_t lease = 0);
  // Adds `delta` to the decimal integer at `key` (0 when absent), atomically, putting the sum
  // with `lease` (0: none); the new value.
  int64_t add(const std::string& key, int64_t delta, int64_t lease = 0);
  // Whether it existed.
  bool erase(const std::string& key);
  // How many keys it erased.
  int64_t erase_prefix(const std::string& prefix);

  // Waits until `key` exists, or `timeout` has passed (std::nullopt), watching it rather than
  // asking again.
  std::optional<EtcdValue> wait_for(const std::string& key, std::chrono::milliseconds timeout);

  // A lease that expires `ttl` after its last keep-alive; keys put with it are erased then.
  int64_t grant_lease(std::chrono::seconds ttl);
  // Renews the lease; false when it had already expired (its keys are gone).
  bool keep_alive(int64_t lease);
  void revoke_lease(int64_t lease);

  // "host:port,host:port,..." for messages.
  std::string members_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A small file the user named (a PEM file, a password file), read through the Env: a regular
// file of 1 byte to 1 MiB, never a FIFO or a device to block on. InvalidArgument naming `what`,
// the path and `expected` ("a PEM file") otherwise.
std::string read_etcd_file(const std::string& path, const std::string& what,
                           const std::string& expected);

// The key just after every key that starts with `prefix` (etcd's range end for a prefix).
std::string prefix_end(const std::string& prefix);

}  // namespace dist::collective::etcd
