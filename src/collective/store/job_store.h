// JobStore: the job's rendezvous store as its processes use it, whichever holds it: the built-in
// store (StoreClient, a connection to a StoreServer a worker or dist-launch hosts) or an etcd
// cluster (collective/etcd/etcd_store.h). The rendezvous, the heartbeats, liveness and the elastic
// membership speak to this and not to a backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "collective/store/store_protocol.h"

namespace dist::collective {

class JobStore : public c10d::Store {
 public:
  using c10d::Store::Store;

  // For messages: "the rendezvous store at 127.0.0.1:2222" or "the etcd rendezvous at
  // etcd://127.0.0.1:2379,.../dist/job/".
  virtual std::string where() const = 0;
  // What goes before the keys this connection names (scoped_key).
  virtual const std::string& key_scope() const = 0;

  // "alive/<name>": the member's heartbeat counter.
  static constexpr const char* kProcessKeyPrefix = "alive/";
  // "left/<name>": the counter's value when the member left the job on purpose (its process
  // ends; the store's host need not wait for its beat to go stale).
  static constexpr const char* kLeftKeyPrefix = "left/";
  // "process/<name>": the member's process in this group (core/process_state.h), whose end is
  // seen at once on the same machine.
  static constexpr const char* kProcessIdentityKeyPrefix = "process/";
};

// `key` under `scope` (the members of one generation of an elastic job keep to
// "generation/<n>/"), except the keys of the store or of a process rather than of a group:
// store::kClosingKey and those beginning with kProcessKeyPrefix or kLeftKeyPrefix, which are the
// whole job's. kProcessIdentityKeyPrefix is a group's: a worker started again after a loss is
// another process in the next generation.
inline std::string scoped_key(const std::string& scope, const std::string& key) {
  if (scope.empty() || key == store::kClosingKey) return key;
  for (const char* process_key : {JobStore::kProcessKeyPrefix, JobStore::kLeftKeyPrefix})
    if (key.rfind(process_key, 0) == 0) return key;
  return scope + key;
}

// Store values are bytes; the library's are text.
inline std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
inline std::string to_text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// Records through `store` that member `name` left on purpose: "left/<name>" = its heartbeat
// counter now (the store's host then need not wait for its beat to go stale).
void record_leave(JobStore& store, const std::string& name);

}  // namespace dist::collective
