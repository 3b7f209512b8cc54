#include "collective/etcd/etcd_claim.h"

#include <iostream>
#include <optional>
#include <thread>

#include "collective/etcd/etcd_connection.h"
#include "collective/store/job_store.h"
#include "core/stop_request.h"
#include "dist/core/error.h"

namespace dist::collective::etcd {
namespace {

using Clock = std::chrono::steady_clock;

// The members whose heartbeat counters are still leased under the prefix: "worker:0, worker:2".
std::string beating(EtcdClient& client, const std::string& prefix) {
  std::string names;
  const std::string alive = prefix + JobStore::kProcessKeyPrefix;
  for (const EtcdValue& counter : client.get_prefix(alive))
    names += (names.empty() ? "" : ", ") + counter.key.substr(alive.size());
  return names;
}

// The full etcd key that lists member `rank` of `spec` as joined to the group's rendezvous.
std::string joined_key(const ProcessGroupSpec& spec, int rank) {
  return spec.rendezvous.etcd_prefix +
         scoped_key(store_key_scope(spec),
                    "joined/" + spec.members.at(static_cast<size_t>(rank)).name);
}

}  // namespace

void claim_prefix(const ProcessGroupSpec& spec) {
  const RendezvousAddress& address = spec.rendezvous;
  EtcdClient& client = *shared_etcd_client(address);
  const std::string& prefix = address.etcd_prefix;
  const std::string chief = spec.members.at(static_cast<size_t>(spec.rank)).name;
  const std::string joined = joined_key(spec, spec.rank);
  const auto deadline = Clock::now() + spec.rendezvous_timeout;
  bool told = false;  // "waiting for the job ... to end", once
  while (true) {
    const auto job = client.get(prefix + kJobKey);
    const bool previous = client.get(prefix + store::kClosingKey) || client.get(joined) ||
                          (job && job->value != spec.job_id);
    if (job && !previous) return;  // this job, forming (the others wait for "job" to join)
    if (!job && client.get_prefix(prefix).empty()) {
      if (client.compare_and_set(prefix + kJobKey, std::nullopt, spec.job_id).swapped) return;
      continue;  // another chief wrote first: look again
    }
    const std::string still = beating(client, prefix);
    if (still.empty()) {
      const int64_t erased = client.erase_prefix(prefix);
      std::cout << chief << ": erased " << erased << " key(s) of a previous job under "
                << address.to_string() << " (nothing of it beats)" << std::endl;
      continue;
    }
    DIST_CHECK(Clock::now() < deadline, CollectiveError, "the etcd prefix ", address.to_string(),
               " still holds a running job (", still, " beat there) after the rendezvous timeout; ",
               "stop that job or give this one another prefix");
    if (!told)
      std::cout << chief << ": waiting for the job under " << address.to_string() << " to end ("
                << still << " still beat)" << std::endl;
    told = true;
    detail::throw_if_stop_requested("waiting for a previous job's etcd keys to go");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

bool anything_beats(const RendezvousAddress& address) {
  return !beating(*shared_etcd_client(address), address.etcd_prefix).empty();
}

JoinView view_before_joining(const ProcessGroupSpec& spec) {
  const RendezvousAddress& address = spec.rendezvous;
  const std::string& prefix = address.etcd_prefix;
  const std::string chief = spec.members.at(0).name;
  const std::string joined = joined_key(spec, spec.rank);
  const std::string chief_joined = joined_key(spec, 0);
  const std::string chief_alive = prefix + JobStore::kProcessKeyPrefix + chief;
  JoinView view;
  std::optional<std::string> job;
  bool listed = false, beats = false;  // the chief's "joined" key; its heartbeat
  for (const EtcdValue& value : shared_etcd_client(address)->get_prefix(prefix)) {
    if (value.key == prefix + kJobKey) job = value.value;
    view.self_joined = view.self_joined || value.key == joined;
    view.closing = view.closing || value.key == prefix + store::kClosingKey;
    listed = listed || value.key == chief_joined;
    beats = beats || value.key == chief_alive;
  }
  if (!job)
    view.unclaimed = detail::concat("no job holds ", address.to_string(),
                                    " yet: its chief (collective rank 0) claims it as it starts");
  else if (*job != spec.job_id)
    view.unclaimed = detail::concat(address.to_string(), " holds the job '", *job, "', not '",
                                    spec.job_id, "' (DIST_JOB_ID): a previous job's keys, which ",
                                    "its chief erases once nothing of that job beats");
  // A chief beats from before it joins to its end (liveness.h), so a chief listed as joined
  // that does not beat is a previous run's: one that ended before this member joined it, which
  // left no "joined" key of this member to tell it by.
  else if (spec.rank != 0 && listed && !beats)
    view.unclaimed = detail::concat(address.to_string(), " lists ", chief,
                                    " as joined but nothing of it beats: a previous run's keys, "
                                    "which ",
                                    chief, " erases as it starts");
  return view;
}

}  // namespace dist::collective::etcd
