#include "collective/liveness.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "collective/heartbeat.h"
#include "collective/store/store_client.h"
#include "collective/store_connection.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using Clock = std::chrono::steady_clock;

const std::string& name_of(const ProcessGroupSpec& spec, int rank) {
  return spec.members[static_cast<size_t>(rank)].name;
}

// The members other than this one whose heartbeat did not move in 1.5 s ("a, b"); the others
// go to *alive.
std::string lost_by_heartbeat(JobStore& store, const ProcessGroupSpec& spec,
                              std::vector<int>* alive) {
  const auto quiet = std::chrono::milliseconds(1500);
  HeartbeatWatch watch(store);
  for (int r = 0; r < static_cast<int>(spec.members.size()); ++r)
    if (r != spec.rank) watch.still_for(name_of(spec, r));  // where each counter stands now
  std::this_thread::sleep_for(quiet);
  std::string lost;
  for (int r = 0; r < static_cast<int>(spec.members.size()); ++r) {
    if (r == spec.rank) continue;
    if (watch.still_for(name_of(spec, r)) >= quiet)
      lost += (lost.empty() ? "" : ", ") + member_name(spec, r);
    else
      alive->push_back(r);
  }
  return lost;
}

// The live members that have issued fewer than `sequence` collectives, with their counts; they
// leave *alive: not in the collective that failed, they have no failure of theirs to diagnose.
std::string members_behind(JobStore& store, const ProcessGroupSpec& spec, int64_t sequence,
                           std::vector<int>* alive) {
  std::string behind;
  for (int r = 0; r < static_cast<int>(spec.members.size()); ++r) {
    const std::string key = "issued/" + name_of(spec, r);
    if (r == spec.rank || !store.check({key})) continue;
    const int64_t theirs = std::stoll(to_text(store.get(key)));
    if (theirs >= sequence) continue;
    behind +=
        detail::concat(behind.empty() ? "" : ", ", member_name(spec, r), " (issued ", theirs, ")");
    alive->erase(std::remove(alive->begin(), alive->end(), r), alive->end());
  }
  return behind;
}

}  // namespace

Liveness::Liveness(Rendezvous& rendezvous)
    : rendezvous_(rendezvous), spec_(rendezvous.spec()), heartbeat_(spec_, issued_) {}

void Liveness::close_transport() {
  if (closed_.exchange(true)) return;
  if (close_) close_();
}

void Liveness::check_usable(const std::string& what) const {
  DIST_CHECK(!closed_, CollectiveError, what, " on ", member_name(spec_, spec_.rank),
             ": this communicator failed earlier (a worker was lost); recreate the strategy");
}

void Liveness::abort(const std::string& reason) {
  if (failed_.exchange(true)) return;  // already failed in a collective the others see too
  // When the store is gone, the peers' own diagnosis names this member as lost.
  rendezvous_.publish_failure(reason);
  close_transport();
}

void Liveness::fail(const std::string& what, int64_t sequence, const std::exception& error) {
  // Another call already diagnosed this member's failure (several packs in flight).
  DIST_CHECK(!failed_.exchange(true), CollectiveError, what, " on ", member_name(spec_, spec_.rank),
             ": this communicator failed earlier (a worker was lost); recreate the strategy");
  std::string lost, behind, failures;
  std::vector<int> alive;
  c10::intrusive_ptr<JobStore> store;
  try {
    store = connect_to_store(spec_, std::chrono::seconds(3));
    failures = failure_reports(*store, spec_);
    if (failures.empty() && store->check({"verdict"})) {
      lost = to_text(store->get("verdict"));
    } else if (failures.empty()) {
      lost = lost_by_heartbeat(*store, spec_, &alive);
      if (!lost.empty()) store->set("verdict", to_bytes(lost));
    }
    if (failures.empty() && lost.empty() && sequence > 0)
      behind = members_behind(*store, spec_, sequence, &alive);
    store->set("diagnosed/" + name_of(spec_, spec_.rank), to_bytes("1"));
  } catch (const std::exception& e) {
    // The built-in store lives with rank 0; etcd with nobody, and its loss is its own error.
    if (spec_.rendezvous.is_etcd())
      failures = detail::concat("the etcd rendezvous cannot be read (", e.what(), ")");
    else if (spec_.rank != 0)
      lost = member_name(spec_, 0) + " (the rendezvous store at its address is unreachable)";
  }
  // Close now: survivors blocked waiting on this member fail at once and come to read the
  // verdict while the store is still up.
  close_transport();
  if (rendezvous_.hosts_store() && store) wait_until_diagnosed(*store, alive);
  const std::string self = member_name(spec_, spec_.rank);
  if (!failures.empty())
    throw CollectiveError(detail::concat(failures, "; ", self, " stops too (in ", what, ")"));
  if (!lost.empty())
    throw CollectiveError(detail::concat("lost worker: ", lost, " stopped responding during ", what,
                                         " (seen by ", self, "): ", error.what()));
  if (!behind.empty())
    throw CollectiveError(detail::concat(
        "collective timeout: ", behind, " did not reach ", what, " (collective #", sequence,
        ") while ", self,
        " waited; every member must issue the same collectives in the same order: ", error.what()));
  throw CollectiveError(detail::concat(what, " failed on ", self, ": ", error.what()));
}

void Liveness::wait_until_diagnosed(JobStore& store, const std::vector<int>& alive) const {
  const auto until = Clock::now() + std::chrono::seconds(5);
  for (int r : alive) {
    while (Clock::now() < until && !store.check({"diagnosed/" + name_of(spec_, r)}))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dist::collective
