// EtcdStore: a c10d::Store (what ProcessGroupGloo's rendezvous takes) over an etcd cluster, its
// keys under a prefix of the job's own, so that several jobs share one cluster. It waits as the
// built-in store's client does (StoreClient): get() and wait() wait up to the store's timeout
// for a key, then throw CollectiveError naming the keys and the etcd members; a stop signal
// ends a wait within a second (StopRequested).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "collective/etcd/etcd_client.h"

namespace dist::collective::etcd {

class EtcdStore : public c10d::Store {
 public:
  // Keys are `prefix` + the key: a prefix ends in '/' ("/dist/<job>/").
  EtcdStore(std::shared_ptr<EtcdClient> client, std::string prefix,
            std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  // c10d's: a missing key with an empty expectation is created; a missing key otherwise is left
  // missing and `expected` returned; a present key equal to `expected` becomes `desired`. The
  // value after the call.
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  // The keys under the prefix.
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  const std::string& prefix() const { return prefix_; }

 private:
  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
};

}  // namespace dist::collective::etcd
