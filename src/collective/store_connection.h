// Connections to a job's rendezvous store (job_store.h), whichever holds it: what a process
// group's rendezvous, heartbeat and liveness watch each open (apart, so that none of them waits
// behind another's request), and what an elastic job's membership opens outside any group.
#pragma once

#include <chrono>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "collective/process_group_spec.h"
#include "collective/store/job_store.h"

namespace dist::collective {

// Where a job's store is and what it asks of a client.
struct JobStoreAddress {
  HostPort store;                // the built-in store's address
  RendezvousAddress rendezvous;  // etcd instead, when is_etcd()
  std::string job_token;         // the built-in store's (etcd has its own users)
  std::string job_id;
  // "127.0.0.1:2222" or "etcd://h1:2379,.../dist/job/".
  std::string to_string() const {
    return rendezvous.is_etcd() ? rendezvous.to_string() : store.to_string();
  }
};

// A new connection to the store at `address` under `key_scope`, waiting up to `timeout` for it
// (the built-in store: StoreClient's constructor, its errors and `stop_on_signal`).
c10::intrusive_ptr<JobStore> connect_to_job_store(const JobStoreAddress& address,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& key_scope = "",
                                                  bool stop_on_signal = true);

// The store of `spec`'s job.
JobStoreAddress job_store_address(const ProcessGroupSpec& spec);

// A new connection to the store of `spec`, under the group's key scope.
c10::intrusive_ptr<JobStore> connect_to_store(const ProcessGroupSpec& spec,
                                              std::chrono::milliseconds timeout);

}  // namespace dist::collective
