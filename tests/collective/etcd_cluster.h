// A real etcd cluster for tests: Debian's etcd (package etcd-server) started as `members`
// processes on free loopback ports, each with a data directory of its own under a temporary
// folder; killed and reaped on destruction, so no member outlives its test.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dist/core/host_port.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::testing {

class EtcdCluster {
 public:
  // Starts the members and waits (up to 30 s) until the cluster takes a write. `available()`
  // false, with `why()`, when etcd is not installed; throws Error when it does not come up.
  explicit EtcdCluster(int members);
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

 private:
  void start(int i, const std::string& state);

  std::string binary_;
  std::string why_;
  TempDir dir_;
  std::vector<HostPort> clients_;
  std::vector<int> peer_ports_;
  std::vector<size_t> process_of_;  // member -> index in processes_
  WorkerProcesses processes_;
};

}  // namespace dist::testing
