#include "collective/rendezvous.h"

#include <iostream>
#include <set>
#include <thread>

#include "collective/etcd/etcd_claim.h"
#include "collective/heartbeat.h"
#include "collective/store/store_client.h"
#include "collective/store/store_host.h"
#include "collective/store/store_server.h"
#include "collective/store_connection.h"
#include "core/process_state.h"
#include "core/stop_request.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using Clock = std::chrono::steady_clock;

const std::string& self_name(const ProcessGroupSpec& spec) {
  return spec.members[static_cast<size_t>(spec.rank)].name;
}

// A member that announced itself (its process, its heartbeat) and is missing from a wait will
// not come once its process has ended (seen at once on the same machine) or its heartbeat has
// stood still for kStale: it was lost during the start-up (killed, or it died after the
// survivors of an elastic job agreed on the generation). The others then fail at once, naming
// it, as they would for a loss mid-run, instead of waiting out the rendezvous timeout.
class LostMembers {
 public:
  LostMembers(JobStore& store, const ProcessGroupSpec& spec)
      : store_(store), spec_(spec), beats_(store) {}

  // Why member `rank`, missing now, is lost ("its process ended"), or "".
  std::string lost(int rank) {
    const std::string& name = spec_.members[static_cast<size_t>(rank)].name;
    const std::string process = JobStore::kProcessIdentityKeyPrefix + name;
    if (store_.check({process}) && detail::identified_process_ended(to_text(store_.get(process))))
      return "its process ended";
    // Never beat; or, on etcd, its counter's lease expired: a beat seen before is gone.
    if (!store_.check({JobStore::kProcessKeyPrefix + name}) && !beat_seen_.count(name)) return "";
    beat_seen_.insert(name);
    return beats_.still_for(name) > kStale ? "its heartbeat has not moved for 3 s" : "";
  }

 private:
  std::set<std::string> beat_seen_;
  static constexpr std::chrono::seconds kStale{3};  // six missed beats
  JobStore& store_;
  const ProcessGroupSpec& spec_;
  HeartbeatWatch beats_;
};

// A store that has not closed yet may still belong to a job whose members were all killed: its
// host sees their beats stop within 3 s and then closes. A refused token is given this long
// before it is taken for the user's mistake.
constexpr std::chrono::seconds kOldStoreLinger{6};

}  // namespace

std::string failure_reports(JobStore& store, const ProcessGroupSpec& spec) {
  std::string reports;
  for (int r = 0; r < static_cast<int>(spec.members.size()); ++r) {
    const std::string key = "failed/" + spec.members[static_cast<size_t>(r)].name;
    if (r == spec.rank || !store.check({key})) continue;
    reports += detail::concat(reports.empty() ? "" : "; ", member_name(spec, r),
                              " failed: ", to_text(store.get(key)));
  }
  return reports;
}

Rendezvous::Rendezvous(const ProcessGroupSpec& spec) : spec_(spec) {
  // A later generation of an elastic job meets in the store its first generation started.
  const bool starts_job = spec_.rank == 0 && spec_.elastic_generation.value_or(0) == 0;
  if (spec_.rendezvous.is_etcd()) {
    // Nobody hosts etcd: the job's chief makes its prefix the job's (a previous job's keys,
    // once nothing of that job beats, are erased).
    if (starts_job) etcd::claim_prefix(spec_);
  } else if (starts_job) {
    host_store();
  }
  connect();
}

Rendezvous::~Rendezvous() {
  store_.reset();
  server_.reset();
}

c10::intrusive_ptr<JobStore> Rendezvous::store() const { return store_; }

void Rendezvous::host_store() {
  const HostPort at = spec_.store_address;
  if (spec_.job_token.empty())
    std::cerr << "warning: this job has no job token (DIST_JOB_TOKEN or DIST_JOB_TOKEN_FILE; "
                 "dist-launch makes one), so any process that can reach "
              << at.to_string() << " can join its rendezvous; see SECURITY.md" << std::endl;
  StoreHostChoice host;
  if (!spec_.store_in_process) {
    host = locate_store_host();
    if (host.missing) std::cerr << missing_store_host_warning() << std::endl;
  }
  if (!host.binary.empty()) {
    std::vector<std::string> names;
    for (const auto& member : spec_.members) names.push_back(member.name);
    start_store_host({host.binary, at, names, spec_.rendezvous_timeout, spec_.collective_timeout,
                      self_name(spec_), spec_.job_token, spec_.job_id,
                      spec_.elastic_generation.has_value()});
    return;
  }
  try {
    server_ = std::make_unique<StoreServer>(at, spec_.job_token, spec_.job_id);
  } catch (const std::exception& e) {
    throw CollectiveError(detail::concat("cannot host the rendezvous store at ", at.to_string(),
                                         " (", self_name(spec_), "): ", e.what(),
                                         "; is the port in use?"));
  }
}

void Rendezvous::connect() {
  const std::string at = rendezvous_where(spec_);
  const std::string& self = self_name(spec_);
  // A store that says it is another job's, that is closing, or that already lists this task as
  // joined is not this job's: the host of a previous job on the same address, which exits as
  // soon as its members are gone (joining it would keep it alive with our heartbeat), or a
  // second process was started as this task. Leave it at once and try again until the
  // rendezvous timeout.
  const auto wait = spec_.rendezvous_timeout +
                    (spec_.rank == 0 ? std::chrono::milliseconds(0) : kStoreHostStartAllowance);
  const auto start = Clock::now();
  const auto deadline = start + wait;
  std::string not_ours;
  while (true) {
    try {
      store_ = connect_to_store(spec_, std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::max(deadline - Clock::now(), Clock::duration(0))));
      not_ours = why_not_ours(at);
      if (not_ours.empty()) return;
      store_.reset();
    } catch (const StoreOfAnotherJob& e) {
      not_ours = detail::concat(e.what(), "; ", self,
                                " waited for its own job's store until the rendezvous timeout: "
                                "stop the other job or use other ports");
    } catch (const StoreRefused& e) {
      if (Clock::now() > std::min(deadline, start + kOldStoreLinger)) throw;
      not_ours = e.what();
    } catch (const CollectiveError& e) {
      if (spec_.rendezvous.is_etcd())
        throw CollectiveError(detail::concat("cannot reach the etcd rendezvous at ", at, " (", self,
                                             "): ", e.what()));
      if (spec_.rank == 0) {
        // Rank 0 started the store only in an elastic job's first generation (or a fixed job).
        const bool started_now = spec_.elastic_generation.value_or(0) == 0;
        throw CollectiveError(
            detail::concat("cannot reach the rendezvous store at ", at,
                           started_now ? " that " + self + " just started: "
                                       : " that the job's first generation started (it has gone): ",
                           e.what()));
      }
      throw CollectiveError(
          detail::concat(member_name(spec_, 0), " never joined: its rendezvous store at ", at,
                         " did not answer within ", wait.count() / 1000.0, " s (", e.what(), ")"));
    }
    if (Clock::now() > deadline) throw CollectiveError(not_ours);
    detail::throw_if_stop_requested("waiting for the rendezvous store");
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

std::string Rendezvous::why_not_ours(const std::string& at) const {
  const std::string& self = self_name(spec_);
  bool self_joined = false;
  bool closing = false;
  if (spec_.rendezvous.is_etcd()) {
    // On etcd the chief first makes the prefix this job's (etcd_claim.h), and the three facts
    // come from one snapshot of it.
    const etcd::JoinView view = etcd::view_before_joining(spec_);
    if (!view.unclaimed.empty()) return view.unclaimed;
    self_joined = view.self_joined;
    closing = view.closing;
  } else {
    self_joined = store_->check({"joined/" + self});
    closing = store_->check({store::kClosingKey});
  }
  if (self_joined)
    return detail::concat("the rendezvous store at ", at, " already lists ", self,
                          " as joined: another job on these addresses is still running, or two "
                          "processes were started as ",
                          self, "; stop it or use other ports");
  if (closing)
    return detail::concat("the rendezvous store at ", at, " is closing: its job ended before ",
                          self, " connected; start every worker of a job together");
  return "";
}

void Rendezvous::join() {
  // The process first: once "joined" is there, the others may wait for this member's next key
  // and must be able to tell that its process has ended.
  store_->set(JobStore::kProcessIdentityKeyPrefix + self_name(spec_),
              to_bytes(detail::process_identity()));
  store_->set("joined/" + self_name(spec_), to_bytes("1"));
  wait_for_all("joined/", "joined", "1");
}

std::vector<std::string> Rendezvous::exchange(const std::string& key, const std::string& value) {
  store_->set("exchange/" + key + "/" + self_name(spec_), to_bytes(value));
  wait_for_all("exchange/" + key + "/", "reached the start-up check", value);
  std::vector<std::string> values;
  for (const auto& member : spec_.members)
    values.push_back(to_text(store_->get("exchange/" + key + "/" + member.name)));
  return values;
}

std::function<void()> Rendezvous::lost_member_check(const std::string& what) {
  auto lost_members = std::make_shared<LostMembers>(*store_, spec_);
  return [this, lost_members, what] {
    for (int r = 0; r < static_cast<int>(spec_.members.size()); ++r) {
      if (r == spec_.rank) continue;
      const std::string why = lost_members->lost(r);
      DIST_CHECK(why.empty(), CollectiveError, "lost worker: ", member_name(spec_, r), " (", why,
                 ") stopped while the workers were ", what);
    }
  };
}

bool Rendezvous::publish_failure(const std::string& reason) noexcept {
  try {
    store_->set("failed/" + self_name(spec_), to_bytes(reason));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void Rendezvous::wait_for_all(const std::string& prefix, const char* what,
                              const std::string& own_value) {
  const auto deadline = Clock::now() + spec_.rendezvous_timeout;
  std::string missing;
  auto never = [&](const std::string& extra) {
    return CollectiveError(detail::concat(missing, " never ", what, " within ",
                                          spec_.rendezvous_timeout.count() / 1000.0,
                                          " s (rendezvous timeout)", extra,
                                          "; is every worker started with the same TF_CONFIG "
                                          "cluster?"));
  };
  LostMembers lost_members(*store_, spec_);
  while (true) {
    detail::throw_if_stop_requested(what == std::string("joined")
                                        ? "waiting for every worker to join the rendezvous"
                                        : "waiting for every worker to reach the start-up check");
    std::string now_missing;
    std::string failures;
    std::string lost;
    try {
      failures = failure_reports(*store_, spec_);
      for (int r = 0; r < static_cast<int>(spec_.members.size()); ++r) {
        const std::string key = prefix + spec_.members[static_cast<size_t>(r)].name;
        if (store_->check({key})) continue;
        // Its own key gone: on etcd the chief erased a previous run's keys (etcd_claim.h) just
        // after this member wrote; write it again rather than wait for it forever.
        if (r == spec_.rank) store_->set(key, to_bytes(own_value));
        now_missing += (now_missing.empty() ? "" : ", ") + member_name(spec_, r);
        if (lost.empty()) {
          const std::string why = lost_members.lost(r);
          if (!why.empty()) lost = member_name(spec_, r) + " (" + why + ")";
        }
      }
    } catch (const StopRequested&) {
      throw;
    } catch (const std::exception& e) {
      // The store's host gave up first (its own rendezvous timeout): report what was missing.
      if (!missing.empty()) throw never(" and the rendezvous store closed");
      throw CollectiveError(
          detail::concat("lost the rendezvous store at ", rendezvous_where(spec_), " (",
                         spec_.rendezvous.is_etcd() ? "etcd" : member_name(spec_, 0),
                         ") while waiting for all workers: ", e.what()));
    }
    // Everyone arrived: a member's failure after it published its key is not this wait's to
    // report (the caller's own check, say of the models, names the real cause).
    if (now_missing.empty()) return;
    if (!failures.empty()) {
      saw_peer_failure_ = true;
      throw CollectiveError(detail::concat(failures, "; ", member_name(spec_, spec_.rank),
                                           " stops too (it was waiting until every worker ", what,
                                           ")"));
    }
    DIST_CHECK(lost.empty(), CollectiveError, "lost worker: ", lost, " stopped before it ", what);
    missing = now_missing;
    if (Clock::now() > deadline) throw never("");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dist::collective
