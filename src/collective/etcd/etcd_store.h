// EtcdStore: the job's store (JobStore, what ProcessGroupGloo's rendezvous also takes) over an
// etcd cluster, its keys under a prefix of the job's own, so that several jobs share one
// cluster. It waits as the built-in store's client does (StoreClient): get() and wait() wait up
// to the store's timeout for a key, then throw CollectiveError naming the keys and the etcd
// members; a stop signal ends a wait within a second (StopRequested).
//
// Heartbeats are leased: the counters under JobStore::kProcessKeyPrefix ("alive/<name>") are
// put with a lease of this connection's, renewed as they beat, so the counter of a process that
// vanished (killed, its host gone) is erased by etcd itself kHeartbeatLease after its last
// beat. Nothing of the job then depends on any worker's process: the job's end is its keys'
// state, and a job whose every process vanished leaves no live counter behind.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/etcd/etcd_client.h"
#include "collective/store/job_store.h"

namespace dist::collective::etcd {

// How long a heartbeat's counter outlives its process's last beat (etcd's lease time; etcd
// refuses much shorter ones with its default election timeout).
constexpr std::chrono::seconds kHeartbeatLease{5};

class EtcdStore : public JobStore {
 public:
  // Keys are `prefix` + the key: a prefix ends in '/' ("/dist/<job>/"); `key_scope` as
  // StoreClient's (scoped_key). `where` names the rendezvous in messages.
  EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix,
            std::chrono::milliseconds timeout, std::string key_scope = "");
  // Revokes the heartbeats' lease: a process that ends on purpose has its counters erased
  // now rather than kHeartbeatLease later (its leave is recorded under left/ first).
  ~EtcdStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  // c10d's: a missing key with an empty expectation is created; a missing key otherwise is left
  // missing and `expected` returned; a present key equal to `expected` becomes `desired`. The
  // value after the call.
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  // A heartbeat's counter (alive/...) is put with this connection's lease, renewed here. Adding
  // 0 only reads, and a missing key stays missing (0): a write would take a counter off its
  // lease, or bring back that of a process that vanished.
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  // The keys under the prefix.
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  std::string where() const override;
  const std::string& key_scope() const override { return key_scope_; }
  const std::string& prefix() const { return prefix_; }
  EtcdClient& client() { return *client_; }

 private:
  std::string full_key(const std::string& key) const {
    return prefix_ + scoped_key(key_scope_, key);
  }
  // The lease for heartbeat counters, granted or renewed when a third of it has passed.
  int64_t heartbeat_lease();

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  std::string key_scope_;
  std::mutex lease_mutex_;
  int64_t lease_ = 0;
  std::chrono::steady_clock::time_point lease_renewed_;
};

}  // namespace dist::collective::etcd
