// The elastic job's protocol under run_elastic (dist/train/elastic.h): ElasticJob runs the
// generations, and ElasticGeneration is what a generation's training asks of the job at its
// step boundaries. Private: ElasticContext is the one face of it a loop sees.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>

#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/strategy.h"
#include "dist/train/checkpoint.h"
#include "dist/train/elastic.h"

namespace dist {

// One generation of an elastic job, handed to the training function: which workers train, and
// the job's committed states.
class ElasticGeneration {
 public:
  ~ElasticGeneration();
  ElasticGeneration(const ElasticGeneration&) = delete;
  ElasticGeneration& operator=(const ElasticGeneration&) = delete;

  // This generation's number (0, 1, ...) and members; the first member is its chief.
  const WorkerGeneration& workers() const;
  // The generation's MultiWorkerMirroredStrategy: `options` with the job's cluster and this
  // generation's members. Call it once per generation, before anything else of the generation;
  // the generation takes part in the job's membership once the strategy's rendezvous completed.
  Strategy make_strategy(MultiWorkerOptions options);
  // Whether this worker is the generation's chief (it holds replica 0). After make_strategy.
  bool chief() const;

  // Whether `step` (completed) is a commit boundary (ElasticOptions::commit_every).
  bool commit_due(int64_t step) const;
  // Commits `checkpoint`, whose state says the step and position (every worker, at the same
  // step; a collective when the checkpoint gathers worker states).
  void commit(Checkpoint& checkpoint);
  // After a commit: whether the workers regroup here because workers wait to join (a
  // collective: every worker asks, the chief decides). Never while `stopping` (all must agree
  // on it). When true, the training function returns; the next generation goes on from the
  // commit.
  bool regroup_now(bool stopping);
  // Whether regroup_now said so in this generation.
  bool regrouping() const;
  // Reads into `checkpoint` the newest commit every worker of this generation holds (sent to
  // those that hold none: the workers that joined), saying so on `out`; false when no worker
  // holds one (the job's first generation, or a loss before the first commit: the loop then
  // starts afresh or from its checkpoint directory). A collective.
  bool restore(Checkpoint& checkpoint, std::ostream& out);

  // The step the job itself resumed from (a checkpoint directory), -1 if it started afresh: a
  // commit carries it, so every generation reports the same.
  int64_t resumed_at_step() const;
  void set_resumed_at_step(int64_t step);
  // After each completed step: after a resize, "Elastic: sizes 3 -> 2 (lost worker:1); step 51
  // done 0.62 s after this worker saw the loss" on `out`, once.
  void report_recovery(std::ostream& out, int64_t step);

 private:
  friend class ElasticJob;
  struct State;
  explicit ElasticGeneration(State& state);
  State& state_;
  std::optional<Strategy> strategy_;
  bool regroup_ = false;
};

// The generations' loop: run_elastic says what it does and throws.
class ElasticJob {
 public:
  // Checks the options against the cluster and that dist-store-host can be found; nothing
  // starts yet.
  explicit ElasticJob(ElasticOptions options);
  ~ElasticJob();
  ElasticJob(const ElasticJob&) = delete;
  ElasticJob& operator=(const ElasticJob&) = delete;

  // Runs `train` once per generation until one ends without regrouping. A worker that starts
  // while the job runs asks to join it and trains from the generation that admits it. A
  // CollectiveError out of `train` (a lost worker) makes the survivors agree on the next
  // generation; any other exception ends the job on this worker. Throws ElasticJobStopped
  // naming the lost workers and the last committed step once fewer than min_workers remain.
  // While it waits between generations, SIGTERM and SIGINT end the wait with StopRequested.
  ElasticResult run(const std::function<GenerationEnd(ElasticGeneration&)>& train);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dist
