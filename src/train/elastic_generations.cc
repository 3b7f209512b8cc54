#include "train/elastic_generations.h"

#include <algorithm>
#include <iostream>

#include "collective/store/store_host.h"
#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"

namespace dist::detail {
namespace {

std::vector<std::string> worker_names(const ClusterSpec& cluster) {
  std::vector<std::string> names;
  for (const auto& task : cluster.collective_tasks()) names.push_back(task.name());
  return names;
}

std::vector<std::string> missing_from(const std::vector<std::string>& before,
                                      const std::vector<std::string>& after) {
  std::vector<std::string> missing;
  for (const auto& name : before)
    if (std::find(after.begin(), after.end(), name) == after.end()) missing.push_back(name);
  return missing;
}

// What a joining worker must share with the job, as "name=value" lines.
std::string settings_lines(const ElasticOptions& options) {
  std::string lines;
  for (const auto& [name, value] : options.settings) lines += name + "=" + value + "\n";
  return lines;
}

}  // namespace

Generations::Generations(const ElasticOptions& options, const ClusterConfig& config)
    : options_(options),
      config_(config),
      self_(config.task.name()),
      store_{config.cluster.store_address(),
             rendezvous_address_or_environment(options.strategy.communication.rendezvous,
                                               "ElasticOptions::strategy.communication.rendezvous"),
             job_token_from_environment(), job_id_from_environment()},
      settings_(settings_lines(options)),
      members_(worker_names(config.cluster)) {
  DIST_CHECK_ARG(options.min_workers >= 1, "min_workers must be at least 1, got ",
                 options.min_workers);
  DIST_CHECK_ARG(options.min_workers <= static_cast<int>(members_.size()), "min_workers ",
                 options.min_workers, " is more than the ", members_.size(),
                 " workers of the cluster; the job could never start");
  // The job's one store must outlive every generation, generation 0's chief included: etcd
  // does, the built-in one in a process of its own.
  if (store_.rendezvous.is_etcd()) return;
  const collective::StoreHostChoice host = collective::locate_store_host();
  DIST_CHECK_ARG(!host.binary.empty(), "min_workers ", options.min_workers,
                 " needs the rendezvous store in a process of its own (dist-store-host), which "
                 "outlives the generations and their chiefs; ",
                 host.missing ? "it was not found: set DIST_STORE_HOST to its path"
                              : "DIST_STORE_HOST=chief would keep it inside the chief: unset it");
}

Generations::~Generations() {
  if (!membership_ && starting_) ElasticMembership::leave_before_forming(store_, self_);
}

Generations::Start Generations::join_if_running(std::string& resize) {
  using State = ElasticMembership::FoundJob::State;
  const auto found = ElasticMembership::find_job(store_, std::chrono::seconds(2));
  if (found.state == State::kEnded && found.same_job) {
    if (found.stopped) throw ElasticJobStopped(self_ + " has no job to join: " + found.how);
    return job_finished(found.how);
  }
  if (found.state == State::kEnded || found.state == State::kAnother) {
    std::cout << self_ << ": the rendezvous store at " << store_.to_string()
              << " is a previous job's ("
              << (found.state == State::kEnded
                      ? std::string(found.stopped ? "it stopped: " : "it finished ") + found.how
                      : std::string("it is closing"))
              << "); starting a new job once it has closed" << std::endl;
    return Start::kWithEveryWorker;
  }
  if (found.state == State::kNone) return Start::kWithEveryWorker;
  connect();
  const int64_t ticket = membership_->ask_to_join(settings_);
  std::cout << self_ << ": the elastic job runs already; asked to join" << std::endl;
  ElasticMembership::Admission admission;
  try {
    admission = membership_->await_admission(ticket, options_.rendezvous_timeout);
  } catch (const CollectiveError& e) {
    if (membership_->stopped()) throw ElasticJobStopped(e.what());  // no restart helps
    throw;
  }
  if (admission.finished) return job_finished(*admission.finished);
  if (admission.job_gone) {
    std::cout << self_ << ": every worker of the job it asked to join was lost; starting the "
              << "job anew" << std::endl;
    membership_.reset();
    return Start::kWithEveryWorker;
  }
  // Its namesake is out of the group now: beat at once, or the members waiting for it in the
  // next rendezvous would see a heartbeat that stopped (rendezvous.cc, LostMembers).
  membership_->start_heartbeat();
  number_ = admission.generation;
  members_ = admission.members;
  resize = concat("sizes ", admission.previous.size(), " -> ", members_.size(), " (joined ",
                  join_names(missing_from(members_, admission.previous)), ")");
  return Start::kJoined;
}

void Generations::finished(bool chief, const GenerationEnd& end) {
  if (!chief) return;
  membership_->mark_finished(
      concat(end.interrupted ? "stopped by a signal after step " : "at step ", end.steps));
}

void Generations::formed(bool chief) {
  connect();
  membership_->start_heartbeat();
  if (chief) membership_->mark_running(number_, static_cast<int>(members_.size()));
}

void Generations::regroup(bool chief, std::string& resize) {
  std::optional<std::vector<std::string>> decided =
      chief ? membership_->admit_joiners(number_, members_, settings_)
            : membership_->next_members(number_, members_.front());
  DIST_CHECK(decided.has_value(), CollectiveError, "lost worker: ", members_.front(),
             " (the chief) before it admitted the workers waiting to join");
  const std::vector<std::string> next = *decided;
  DIST_CHECK(std::find(next.begin(), next.end(), self_) != next.end(), CollectiveError, self_,
             " is not among the next members (", join_names(next),
             "): the others took this step boundary as a loss");
  const std::vector<std::string> joined = missing_from(next, members_);
  resize += concat(resize.empty() ? "" : ", then ", "sizes ", members_.size(), " -> ", next.size(),
                   joined.empty() ? "" : " (joined " + join_names(joined) + ")");
  members_ = next;
  ++number_;
}

void Generations::after_loss(int64_t committed, std::string& resize) {
  if (!membership_) throw;  // lost before the job formed: nothing to go on from
  const auto wait = options_.agreement_timeout;
  std::vector<std::string> next;
  try {
    next = membership_->next_after_loss(number_, members_, wait);
  } catch (const CollectiveError& e) {
    // Only the store can fail here: without it no survivor can agree, nor a worker join, and
    // a worker started again would begin a new job from step 0. So the job stops, saying so.
    const bool etcd = store_.rendezvous.is_etcd();
    throw ElasticJobStopped(
        concat("the elastic job stops: it lost its rendezvous store at ", store_.to_string(),
               etcd ? " (etcd: a quorum of its members is gone)" : " (dist-store-host)",
               ", without which its workers cannot agree on who goes on: ", e.what(),
               last_committed(committed), etcd ? "; restart etcd's members, then the job" : ""),
        committed);
  }
  const std::vector<std::string> lost = missing_from(members_, next);
  if (lost.empty() && next.size() <= members_.size()) throw;  // no loss to mend
  DIST_CHECK(std::find(next.begin(), next.end(), self_) != next.end(), CollectiveError, self_,
             " was left out of the job's next generation by the other workers (", join_names(next),
             "): it did not say it stays within ",
             std::chrono::duration_cast<std::chrono::seconds>(wait).count(),
             " s of the loss; the job goes on without it");
  const std::string names = join_names(lost);
  if (static_cast<int>(next.size()) < options_.min_workers) {
    const int remaining = static_cast<int>(next.size());
    const std::string why = concat("the elastic job stops: lost ", names, "; ", remaining,
                                   " worker(s) remain, fewer than min_workers ",
                                   options_.min_workers, last_committed(committed));
    membership_->mark_stopped(why);  // a worker started later must not wait to join
    throw ElasticJobStopped(
        why, committed, ElasticJobStopped::BelowMinimum{names, remaining, options_.min_workers});
  }
  resize += concat(resize.empty() ? "" : ", then ", "sizes ", members_.size(), " -> ", next.size(),
                   " (lost ", names, ")");
  members_ = next;
  ++number_;
}

Generations::Start Generations::job_finished(const std::string& how) {
  std::cout << self_ << ": the elastic job finished (" << how
            << ") before a step boundary could admit it; nothing to do" << std::endl;
  return Start::kJobFinished;
}

void Generations::connect() {
  if (membership_) return;
  membership_ = std::make_unique<ElasticMembership>(store_, self_, options_.rendezvous_timeout);
}

std::string Generations::last_committed(int64_t committed) const {
  return concat("; the last committed step is ", committed);
}

}  // namespace dist::detail
