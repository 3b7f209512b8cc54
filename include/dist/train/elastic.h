// Elastic training for any loop (docs/elastic.md): a multi-worker job that goes on when workers
// are lost, and takes in workers that start while it runs, ending with the weights of a run that
// never changed size.
//
// The job runs generations: in each, a fixed set of workers trains under a strategy of their
// own and commits the training state to memory at step boundaries; a loss or a join ends the
// generation, and the next restores the newest commit (docs/elastic.md, "How it works").
//
//   dist::ElasticOptions options;
//   options.min_workers = 2;
//   options.commit_every = 10;
//   dist::ElasticJob job(options);
//   job.run([&](dist::ElasticGeneration& generation) {
//     dist::Strategy strategy = generation.make_strategy(dist::MultiWorkerOptions{});
//     ...make the model, optimizer and checkpoint under `strategy`...
//     int64_t step = generation.restore(checkpoint, std::cout) ? checkpoint.state.step : 0;
//     for (...) {
//       strategy.run(train_step, batch);
//       if (generation.commit_due(++step)) {
//         checkpoint.state.step = step;  // and the data position, the metrics' sums...
//         generation.commit(checkpoint);
//         if (generation.regroup_now(false)) return dist::GenerationEnd{step};
//       }
//     }
//     return dist::GenerationEnd{step};
//   });
//
// Needs the rendezvous store in a process of its own (dist-store-host, which outlives every
// generation's chief): DIST_STORE_HOST, or the installed or built one. A Keras fit becomes
// elastic through keras::callbacks::Elastic (dist/keras/elastic_callback.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "dist/core/error.h"
#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/strategy.h"
#include "dist/train/checkpoint.h"

namespace dist {

// The elastic job ended below min_workers, or a worker found it so when it came to join, or
// the job lost its rendezvous store: starting the worker again would not help (dist-train
// exits 5 for it, which dist-launch does not restart).
class ElasticJobStopped : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

struct ElasticOptions {
  // The job stops (ElasticJobStopped) once fewer workers than this remain. At least 1, at most
  // the cluster's workers.
  int min_workers = 1;
  // Steps between commits (and between the boundaries where joining workers are admitted); a
  // loss costs at most this many steps of work. 0: the loop commits only where it chooses.
  int64_t commit_every = 1;
  // The cluster and this task; empty: resolve_cluster() (TF_CONFIG, Slurm or MPI).
  std::optional<ClusterConfig> cluster;
  // How long a generation's start-up, and a joiner's wait for admission, may take.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::seconds(120);
  // How long a survivor waits for the others to say they stay after a loss: a worker that says
  // nothing within it is left out. At least the strategy's collective timeout, so that every
  // survivor has seen the loss by then.
  std::chrono::milliseconds agreement_timeout = std::chrono::seconds(310);
  // What decides the steps a worker takes, as (name, value) pairs (the global batch, the seed,
  // the data...): a worker that asks to join with other settings is refused, naming the first
  // that differs.
  std::vector<std::pair<std::string, std::string>> settings;
  // Names the program in the messages a worker writes to standard error ("dist-train").
  std::string program = "elastic";
  // How the messages name min_workers (dist-train: "--min-workers"), and what they advise
  // after the job stopped.
  std::string min_workers_name = "min_workers";
  std::string resume_hint = "start the job again to resume from your last checkpoint";
  // Called with "seen" when this worker has seen a loss and with "agreed" once the survivors
  // agreed on the next generation (a test's hook).
  std::function<void(const std::string& stage)> on_loss;
};

// How a generation's training ended: the steps completed, and whether a stop signal ended it
// (said in the job's record of its end, which a worker that comes later reads).
struct GenerationEnd {
  int64_t steps = 0;
  bool interrupted = false;
};

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
  // Whether this worker has committed (or received) a state in this job.
  bool has_committed() const;

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

// What ElasticJob::run returns.
struct ElasticResult {
  // False when the job finished before a step boundary could admit this worker: it did
  // nothing (said on standard output).
  bool took_part = true;
  // The workers of each generation, in order ([3, 2, 3]).
  std::vector<int> worker_sizes;
  GenerationEnd end;   // the last generation's
  bool chief = false;  // whether this worker was the last generation's chief
};

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
