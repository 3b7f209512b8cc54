// ProcessGroupSpec: what a cross-process communicator needs to know about its group. The
// collective layer knows nothing of TF_CONFIG or task types: the strategy turns its cluster
// into a rank, members and a rendezvous address.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/collective/rendezvous_address.h"
#include "dist/core/host_port.h"

namespace dist::collective {

struct Member {
  std::string name;  // for messages: "worker:1"
  HostPort address;  // its host is the interface the transport binds to
};

struct ProcessGroupSpec {
  int rank = 0;
  std::vector<Member> members;  // in rank order
  HostPort store_address;       // where rank 0 hosts the rendezvous store
  // An etcd cluster instead (is_etcd()): nobody hosts a store, and store_address is unused.
  RendezvousAddress rendezvous;
  // A collective not completed within this time fails, naming the lost or missing member.
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(5);
  // Every member must have joined within this time.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(2);
  // Host the store inside rank 0's process instead of its own process (tests that run every
  // member as a thread of one process).
  bool store_in_process = false;
  // Before each collective, agree on what it is (kind, element count, dtype) in a small
  // fixed-size all-reduce, so members that diverge get a CollectiveError naming what each
  // issued; without it, Gloo aborts the process on the first mismatched message size.
  bool check_collectives = true;
  // When every member's address names the same host: all_reduce, broadcast and barrier go
  // through a shared-memory segment instead of TCP (shm/same_host_communicator.h), with data
  // areas of this many bytes per member.
  bool same_host_shared_memory = false;
  int64_t shared_memory_slot_bytes = int64_t{4} << 20;
  // The secret every member presents to the rendezvous store before it can read or write
  // anything of the job; empty: a job without one (the store then admits any client that
  // speaks its protocol).
  std::string job_token;
  // The job's identity (job_id_from_environment, cluster_resolver.h): a store whose job has
  // another one is not this group's; empty: a job without one.
  std::string job_id;
  // An elastic job, whose workers may change between generations (docs/elastic.md): which
  // generation this group is. Its keys in the store live under store_key_scope(); the job keeps
  // one store for its whole life, hosted by generation 0's rank 0 (whose store host then stays
  // up while any worker of the job is, not only while that worker is); later generations
  // connect to it. Unset: a fixed group, the job's only one.
  std::optional<int> elastic_generation;
};

// Where the group's keys live in the store: "generation/<n>/" in an elastic job, else the top.
inline std::string store_key_scope(const ProcessGroupSpec& spec) {
  return spec.elastic_generation ? "generation/" + std::to_string(*spec.elastic_generation) + "/"
                                 : std::string();
}

// Where the group meets, for messages: "127.0.0.1:2222" or "etcd://h1:2379,.../dist/job/".
inline std::string rendezvous_where(const ProcessGroupSpec& spec) {
  return spec.rendezvous.is_etcd() ? spec.rendezvous.to_string() : spec.store_address.to_string();
}

// Member `rank` of `spec` for messages: "worker:1 (127.0.0.1:2223)".
inline std::string member_name(const ProcessGroupSpec& spec, int rank) {
  const Member& member = spec.members.at(static_cast<size_t>(rank));
  return member.name + " (" + member.address.to_string() + ")";
}

}  // namespace dist::collective
