// Rendezvous: this member's connection to the group's rendezvous store (store/job_store.h), for
// any collective backend. The built-in store: rank 0 starts it in its own process,
// dist-store-host (store_host.h), so that it outlives a crashed rank 0; with `store_in_process`
// (or without that binary) rank 0 hosts it itself. An etcd cluster (spec.rendezvous): nobody
// hosts it, and the first generation's rank 0 claims the job's prefix (etcd/etcd_claim.h).
//
// The store's keys, per member name: "joined/<name>" (it arrived), "exchange/<key>/<name>"
// (exchange), "failed/<name>" (it aborted, and why); liveness.h adds the heartbeat's keys.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "collective/process_group_spec.h"

namespace dist::collective {

class JobStore;
class StoreServer;

class Rendezvous {
 public:
  // Hosts the store (rank 0) and connects to it. Throws CollectiveError naming the store's
  // address or the member that hosts it when it cannot.
  explicit Rendezvous(const ProcessGroupSpec& spec);
  ~Rendezvous();

  // Announces this member and waits until every member did: "worker:2 (...) never joined".
  void join();
  // Publishes `value` under `key` and returns every member's, in rank order.
  std::vector<std::string> exchange(const std::string& key, const std::string& value);
  // A check to call while the members do `what` ("connecting the Gloo process group"), on this
  // thread, while this Rendezvous lives: CollectiveError naming a member whose process ended or
  // whose heartbeat stopped, which will not come.
  std::function<void()> lost_member_check(const std::string& what);
  // Publishes that this member fails for `reason`; false when the store is gone.
  bool publish_failure(const std::string& reason) noexcept;
  // Whether a wait ended because a peer published its failure (this member then stops too,
  // and has nothing to tell the others).
  bool saw_peer_failure() const { return saw_peer_failure_; }

  // The connection, for a transport that forms its own mesh through the store (Gloo).
  c10::intrusive_ptr<JobStore> store() const;
  // Whether the store's server runs in this process (it then must stay up until the peers
  // have read a verdict: liveness.h).
  bool hosts_store() const { return server_ != nullptr; }
  const ProcessGroupSpec& spec() const { return spec_; }

 private:
  void host_store();
  void connect();
  // Why the store just connected is not this member's to join yet ("" when it is): another
  // job's, closing, one that lists this member as joined, or an etcd prefix not yet claimed.
  std::string why_not_ours(const std::string& at) const;
  // Waits until every member's `prefix`<name> key is there; this member's (`own_value`) is
  // written again if it vanished.
  void wait_for_all(const std::string& prefix, const char* what, const std::string& own_value);

  const ProcessGroupSpec& spec_;  // the owner's, which outlives this
  std::unique_ptr<StoreServer> server_;
  c10::intrusive_ptr<JobStore> store_;
  std::atomic<bool> saw_peer_failure_{false};
};

// "worker:1 (host:port) failed: <reason>; ..." for the members other than spec.rank that
// published a failure in `store`, or empty.
std::string failure_reports(JobStore& store, const ProcessGroupSpec& spec);

}  // namespace dist::collective
