#include "elastic_job.h"

#include <algorithm>
#include <iostream>
#include <memory>

#include "dist/core/error.h"
#include "dist/distribute/cluster_resolver.h"
#include "distribute/elastic_membership.h"

namespace dist::tools {
namespace {

using Clock = std::chrono::steady_clock;

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

// The job between generations: who trains next, or why the job stops.
class Generations {
 public:
  Generations(const TrainOptions& options, const ClusterConfig& config)
      : options_(options),
        config_(config),
        self_(config.task.name()),
        members_(worker_names(config.cluster)) {
    DIST_CHECK_ARG(options.min_workers <= static_cast<int>(members_.size()), "--min-workers ",
                   options.min_workers, " is more than the ", members_.size(),
                   " workers of the cluster; the job could never start");
  }

  const std::vector<std::string>& members() const { return members_; }

  // Once the first generation formed (its chief started the job's store).
  void joined() {
    if (membership_) return;
    membership_ = std::make_unique<detail::ElasticMembership>(
        config_.cluster.store_address(), job_token_from_environment(), self_,
        whole_milliseconds("--rendezvous-timeout", options_.rendezvous_timeout));
  }

  // After generation `number` failed with `error` on this worker: the next members, or throws
  // the reason the job stops. `resize` gets "sizes 3 -> 2 (lost worker:1)".
  void after_loss(int number, const CollectiveError& error, int64_t committed,
                  std::string& resize) {
    if (!membership_) throw error;  // lost before the job formed: nothing to go on from
    const auto wait = whole_milliseconds("--collective-timeout", options_.collective_timeout) +
                      std::chrono::seconds(10);
    const std::vector<std::string> next = membership_->next_after_loss(number, members_, wait);
    const std::vector<std::string> lost = missing_from(members_, next);
    if (lost.empty()) throw error;  // everyone is still here: not a loss a resize mends
    const std::string names = detail::join_names(lost);
    DIST_CHECK(std::find(next.begin(), next.end(), self_) != next.end(), CollectiveError, self_,
               " was left out of the job's next generation by the other workers (",
               detail::join_names(next), "): it did not say it stays within ", wait.count() / 1000,
               " s of the loss of ", names, "; the job goes on without it");
    DIST_CHECK(static_cast<int>(next.size()) >= options_.min_workers, CollectiveError,
               "the elastic job stops: lost ", names, "; ", next.size(),
               " worker(s) remain, fewer than --min-workers ", options_.min_workers,
               "; the last committed step is ", committed,
               " (start the job again with --checkpoint-dir to resume from a checkpoint)");
    resize = detail::concat("sizes ", members_.size(), " -> ", next.size(), " (lost ", names, ")");
    members_ = next;
  }

 private:
  const TrainOptions& options_;
  const ClusterConfig& config_;
  std::string self_;
  std::vector<std::string> members_;
  std::unique_ptr<detail::ElasticMembership> membership_;
};

}  // namespace

std::string CommittedStates::path_of(int64_t step) {
  return "/committed/step-" + std::to_string(step) + ".safetensors";
}

void CommittedStates::commit(int64_t step, const Checkpoint& checkpoint) {
  checkpoint.write(path_of(step), &env_);
  if (steps_.empty() || steps_.back() != step) steps_.push_back(step);
  while (steps_.size() > 2) {
    env_.remove_file(path_of(steps_.front()));
    steps_.pop_front();
  }
}

bool CommittedStates::has(int64_t step) const {
  return std::find(steps_.begin(), steps_.end(), step) != steps_.end();
}

void CommittedStates::restore(int64_t step, Checkpoint& checkpoint) {
  checkpoint.read(path_of(step), &env_);
}

TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out) {
  const auto job_start = Clock::now();
  PreemptionWatcher preemption;
  const ClusterConfig config = resolve_cluster().config;
  Generations generations(options, config);
  ElasticRun elastic;
  elastic.commit_every = options.commit_every;
  for (int number = 0;; ++number) {
    elastic.sizes.push_back(static_cast<int>(generations.members().size()));
    try {
      JobSetup job = start_job(options, chief_out, WorkerGeneration{number, generations.members()});
      generations.joined();
      TrainResult result =
          run_custom_loop(options, job, preemption, chief_out, job_start, &elastic);
      result.worker_sizes = elastic.sizes;
      return result;
    } catch (const CollectiveError& e) {
      elastic.recovering_since = Clock::now();
      std::cerr << "dist-train: " << config.task.name() << ": generation " << number
                << " failed: " << e.what() << std::endl;
      generations.after_loss(number, e, elastic.committed.latest(), elastic.resize);
    }
  }
}

}  // namespace dist::tools
