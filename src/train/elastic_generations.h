// An elastic job between its generations (dist/train/elastic.h): who trains next, or why the
// job stops. Every decision goes through the job's rendezvous store (ElasticMembership).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/distribute/cluster_spec.h"
#include "dist/train/elastic.h"
#include "distribute/cluster/elastic_membership.h"

namespace dist::detail {

class Generations {
 public:
  Generations(const ElasticOptions& options, const ClusterConfig& config);
  // A worker that took part in the first generation's start-up but left before the job formed
  // (a failure, a signal) says so: the store's host then closes without waiting 3 s for its
  // beat to go stale. Once formed, ElasticMembership says it.
  ~Generations();
  Generations(const Generations&) = delete;
  Generations& operator=(const Generations&) = delete;

  // Before a generation's start-up, in which this worker's heartbeat reaches the store.
  void starting() { starting_ = true; }

  const std::vector<std::string>& members() const { return members_; }
  int number() const { return number_; }

  enum class Start { kWithEveryWorker, kJoined, kJobFinished };

  // A worker that starts while the job runs joins it: the generation it joins, and its
  // members, come from the chief that admits it. Otherwise the job starts with every worker.
  // kJobFinished: the job completed before a step boundary could admit this worker (said on
  // standard output). A store left by a previous job on these addresses (it ended, or it has
  // another identity) is no job to join: this worker starts the new one, whose rendezvous
  // waits for that store to close.
  Start join_if_running(std::string& resize);
  // The job ended after `end` (`chief`: this worker is the last generation's chief).
  void finished(bool chief, const GenerationEnd& end);
  // Once a generation formed (its first chief started the job's store).
  void formed(bool chief);
  std::vector<int> sizes() { return membership_->sizes(number_); }
  bool join_requested() { return membership_->join_requested(members_, settings_); }
  // At a step boundary where workers join: the next members. `resize` gets "sizes 2 -> 3
  // (joined worker:1)". Throws CollectiveError when the chief is lost before it decides, or
  // when this worker is not among the next members (the others took the boundary as a loss:
  // the vote that led here failed on them), for the caller to treat as a loss.
  void regroup(bool chief, std::string& resize);
  // After the generation failed with a CollectiveError on this worker: the next members, or
  // throws the reason the job stops. `resize` gets "sizes 3 -> 2 (lost worker:1)". Called
  // from the handler of the generation's CollectiveError, which `throw;` passes on.
  void after_loss(int64_t committed, std::string& resize);

 private:
  Start job_finished(const std::string& how);
  void connect();
  // "; the last committed step is N": how a stop message ends (the caller adds its advice).
  std::string last_committed(int64_t committed) const;

  const ElasticOptions& options_;
  const ClusterConfig& config_;
  std::string self_;
  collective::JobStoreAddress store_;  // the built-in store's address, or etcd's
  std::string settings_;
  int number_ = 0;
  bool starting_ = false;
  std::vector<std::string> members_;
  std::unique_ptr<ElasticMembership> membership_;
};

}  // namespace dist::detail
