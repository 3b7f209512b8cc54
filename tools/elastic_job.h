// dist-train's elastic job (--min-workers, docs/elastic.md): the custom loop or fit run
// generation after generation. When a worker is lost, the survivors agree on who goes on (through
// the job's rendezvous store), build a new strategy, model and optimizer among themselves, restore
// the last training state each of them committed to memory, and go on with the same global
// batch, so the job ends with the weights of a run that never changed size.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "dist/core/memory_env.h"
#include "dist/train/checkpoint.h"
#include "train_job.h"

namespace dist::tools {

// The training states this worker committed, in memory. Commits are numbered 1, 2, ... in the
// order every worker makes them (a commit is a collective), across generations: the number, not
// the step, names a state, because a step can be committed twice (mid-epoch, then at the epoch's
// end with the next epoch's position). The last two are kept: a loss can end a commit on some
// survivors and not on others, so their newest numbers differ by at most one, and the older of
// them is then held by every survivor.
class CommittedStates {
 public:
  // Commits `checkpoint` (its state.step says the step) as the next number.
  void commit(const Checkpoint& checkpoint);
  // The newest commit's number; -1 if none.
  int64_t latest() const { return commits_.empty() ? -1 : commits_.back().number; }
  // The newest commit's step; -1 if none.
  int64_t latest_step() const { return commits_.empty() ? -1 : commits_.back().step; }
  bool has(int64_t number) const;
  // Reads commit `number` (has(number) must hold) into `checkpoint`, and forgets the newer ones:
  // the job goes on from it.
  void restore(int64_t number, Checkpoint& checkpoint);
  // Commit `number` as bytes, to send to a worker that joins; and taking one received.
  std::string bytes_of(int64_t number) const;
  void adopt(int64_t number, const std::string& bytes);

 private:
  struct Commit {
    int64_t number;
    int64_t step;
  };
  static std::string path_of(int64_t number);
  void forget_front();
  mutable MemoryEnv env_;
  std::deque<Commit> commits_;
};

// What one generation's training (the custom loop, or fit through ElasticFitCallback) needs
// from the elastic job, and the steps both take at a step boundary.
struct ElasticRun {
  CommittedStates committed;
  int64_t commit_every = 1;
  // The checkpoint step the job itself resumed from (--checkpoint-dir), -1 if it started afresh:
  // what the JSON's resumed_at_step says in every generation.
  int64_t resumed_at_step = -1;
  // Set from a resize until the next step completes: then the time between is printed.
  std::optional<std::chrono::steady_clock::time_point> recovering_since;
  std::string recovering_from;  // "this worker saw the loss", ...
  std::string resize;           // "sizes 3 -> 2 (lost worker:1)", said with the recovery time
  // Whether a worker waits to join: the generation's chief asks at each commit, and the group
  // then regroups at that step boundary.
  std::function<bool()> join_requested;

  // Whether `step` (completed) is a step boundary where the workers commit.
  bool commit_due(int64_t step) const { return commit_every > 0 && step % commit_every == 0; }
  // Commits `checkpoint`, whose state is filled (every worker, at the same step).
  void commit(Checkpoint& checkpoint);
  // After a commit: whether the workers regroup here because workers wait to join (a
  // collective: every worker asks, the chief decides). Never while `stopping` (all agree).
  bool regroup_now(const Strategy& strategy, bool chief, bool stopping);
  // Reads the newest commit every worker of this generation holds into `checkpoint` (sent to
  // those that hold none, said on `out`), and takes the job's resumed step from it; false when
  // no worker holds one (a collective).
  bool restore_committed(const Strategy& strategy, Checkpoint& checkpoint, std::ostream& out);
  // After each completed step: after a resize, "Elastic: sizes 3 -> 2 (lost worker:1); step 51
  // done 0.62 s after this worker saw the loss" on `out`, once.
  void report_recovery(std::ostream& out, int64_t step);
};

// One generation's training on its started job: the custom loop or fit.
using GenerationTraining = std::function<TrainResult(JobSetup& job, ElasticRun& elastic)>;

// The elastic job ended below --min-workers, or a worker found it so when it came to join:
// dist-train exits 5, which dist-launch does not start again.
class ElasticJobStopped : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// The elastic job (options.min_workers > 0), `train` once per generation; the chief writes
// progress to `chief_out`. Throws ElasticJobStopped naming the lost workers and the last
// committed step once fewer than --min-workers remain.
TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out,
                                 const GenerationTraining& train);

}  // namespace dist::tools
