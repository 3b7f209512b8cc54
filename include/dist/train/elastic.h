// Elastic training for any loop (docs/elastic.md): a multi-worker job that goes on when workers
// are lost, and takes in workers that start while it runs, ending with the weights of a run that
// never changed size.
//
// The job runs generations: in each, a fixed set of workers trains under a strategy of their
// own and commits the training state to memory at step boundaries; a loss or a join ends the
// generation, and the next restores the newest commit (docs/elastic.md, "How it works").
// run_elastic owns that protocol: the loop registers its state and says when a step is done.
//
//   dist::ElasticOptions options;
//   options.min_workers = 2;
//   options.commit_every = 10;
//   dist::run_elastic(options, [&](dist::ElasticContext& elastic) {
//     dist::Strategy& strategy = elastic.strategy();
//     ...make the model and optimizer under `strategy`...
//     dist::Checkpoint state(model, optimizer.get());
//     elastic.track(state);  // the newest commit, if any: state.state says the step and position
//     ...for each batch from state.state.position:
//       strategy.run(train_step, batch);
//       if (!elastic.step_done(it.position(), kSteps)) break;  // the last step, or a regroup
//   });
//
// Needs the rendezvous store in a process of its own (dist-store-host, which outlives every
// generation's chief): DIST_STORE_HOST, or the installed or built one. A loop that keeps steps
// in flight, or commits where it chooses, calls step_done's parts instead (boundary_due,
// step_completed, commit, regroup_now): dist-train's custom loop does. A Keras fit becomes
// elastic through keras::callbacks::Elastic (dist/keras/elastic_callback.h) over the context.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
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
//
// Below min_workers it says what a caller needs to word its own advice (dist-train names its
// flags): the lost workers, how many remain, and the last step committed.
class ElasticJobStopped : public CollectiveError {
 public:
  struct BelowMinimum {
    std::string lost;     // "worker:1, worker:2"
    int remaining = 0;    // the workers left
    int min_workers = 0;  // ElasticOptions::min_workers
  };
  // `last_committed_step`: -1 when none is known (a worker that came to join a stopped job).
  explicit ElasticJobStopped(const std::string& what, int64_t last_committed_step = -1,
                             std::optional<BelowMinimum> below_minimum = std::nullopt)
      : CollectiveError(what),
        last_committed_step_(last_committed_step),
        below_minimum_(std::move(below_minimum)) {}

  int64_t last_committed_step() const { return last_committed_step_; }
  // Set when the job stopped because fewer than min_workers remained.
  const std::optional<BelowMinimum>& below_minimum() const { return below_minimum_; }

 private:
  int64_t last_committed_step_;
  std::optional<BelowMinimum> below_minimum_;
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
  // The options of each generation's MultiWorkerMirroredStrategy under run_elastic (its cluster
  // and generation are the job's).
  MultiWorkerOptions strategy;
};

// How a generation's training ended: the steps completed, and whether a stop signal ended it
// (said in the job's record of its end, which a worker that comes later reads).
struct GenerationEnd {
  int64_t steps = 0;
  bool interrupted = false;
};

// What run_elastic returns.
struct ElasticResult {
  // False when the job finished before a step boundary could admit this worker: it did
  // nothing (said on standard output).
  bool took_part = true;
  // The workers of each generation, in order ([3, 2, 3]).
  std::vector<int> worker_sizes;
  GenerationEnd end;   // the last generation's
  bool chief = false;  // whether this worker was the last generation's chief
};

class ElasticGeneration;  // private (src/train/elastic_job.h): the job's side of a generation

// What run_elastic hands the training function in each generation: the generation's strategy,
// and the calls a loop makes (hvd.elastic's State, with commit() called for it). Not
// thread-safe: the loop's thread calls it.
class ElasticContext {
 public:
  ElasticContext(const ElasticContext&) = delete;
  ElasticContext& operator=(const ElasticContext&) = delete;

  // This generation's MultiWorkerMirroredStrategy (ElasticOptions::strategy with the job's
  // cluster and this generation's members), made at the first call: its rendezvous is the
  // generation's start-up, which a program may surround with its own signal handling.
  Strategy& strategy();
  // Whether this worker holds replica 0 of the generation. After strategy().
  bool chief() const;
  // This generation's number (0, 1, ...) and members.
  const WorkerGeneration& workers() const;

  // Registers the loop's state (not owned; it outlives the generation's steps) and reads into it
  // the newest commit every worker holds, sent to the workers that joined: afterwards
  // state.state.step and state.state.position say where the loop goes on, and state.state.values
  // the loop's own values. False when nothing was read: no worker holds a commit (the job's
  // first generation, or a loss before the first commit), and the loop goes on from its own
  // start (afresh, or a checkpoint it loads: then set_resumed_at_step). Once per generation,
  // before the first step; a collective. `out`: where the restore and a recovery are said (a
  // program that prints on its chief alone passes a discarding stream on the others).
  bool track(Checkpoint& state, std::ostream& out = std::cout);
  // After each completed step, with the data position after it: counts the step in the tracked
  // state, says a recovery once, commits at the job's boundaries (ElasticOptions::commit_every)
  // and at `last_step`, and regroups there when workers wait to join. False when the loop ends
  // here: `last_step` reached (<= 0: never), or regrouping (the training function then returns;
  // the next generation goes on from this commit).
  bool step_done(const data::IteratorPosition& after, int64_t last_step);
  // The steps completed: the tracked state's.
  int64_t step() const;
  // Whether this generation ends for workers to join (nothing to save yet).
  bool regrouping() const;

  // step_done in parts, for a loop that counts its own steps and fills its own state: one that
  // keeps steps in flight and commits only when none runs (dist-train's), commits at places of
  // its choosing (an epoch's end, with the next epoch's position), or lives in a Keras callback
  // (keras::callbacks::Elastic).
  //
  // Whether `step` (completed) is one of the job's boundaries (ElasticOptions::commit_every): a
  // loop with steps in flight starts none past it until the running ones completed, then
  // commits and asks regroup_now.
  bool boundary_due(int64_t step) const;
  // After each completed step: after a resize, "Elastic: sizes 3 -> 2 (lost worker:1); step 51
  // done 0.62 s after this worker saw the loss", once.
  void step_completed(int64_t step);
  // Commits the tracked state as the loop filled it (its step, position and values), with the
  // step the job resumed from; every worker at the same step (a collective when the state
  // gathers worker states). Where no step runs: the commit holds the weights of its step.
  void commit();
  // After a commit at a boundary: whether the workers regroup here because workers wait to join
  // (a collective: every worker asks, the chief decides and answers the joiners it refuses).
  // Never while `stopping` (the loop ends here anyway: every worker passes the same). When
  // true, the training function returns; the next generation goes on from the commit.
  bool regroup_now(bool stopping);
  // The step the job resumed from (the loop's own checkpoint), -1 if it started afresh: set it
  // when track read nothing and the loop loaded a checkpoint. Commits carry it, so every later
  // generation, and a worker that joins, says the same.
  int64_t resumed_at_step() const;
  void set_resumed_at_step(int64_t step);
  // How this generation's training ended, for the job's record (a worker that comes later
  // reads it); without it, step() and no stop signal.
  void set_end(const GenerationEnd& end) { end_ = end; }

 private:
  friend ElasticResult run_elastic(ElasticOptions, const std::function<void(ElasticContext&)>&);
  ElasticContext(ElasticGeneration& generation, const MultiWorkerOptions& options);
  Checkpoint& tracked(const char* call);
  GenerationEnd end() const;

  ElasticGeneration& generation_;
  const MultiWorkerOptions& options_;
  std::optional<Strategy> strategy_;
  Checkpoint* state_ = nullptr;
  std::ostream* out_ = &std::cout;
  std::optional<GenerationEnd> end_;
};

// Elastic training as one call: runs `train` once per generation until one ends without
// regrouping, the library restoring, committing, regrouping and replaying from the last commit
// after a loss through the ElasticContext's calls. A worker that starts while the job runs asks
// to join it and trains from the generation that admits it. A CollectiveError out of `train` (a
// lost worker) makes the survivors agree on the next generation; any other exception ends the
// job on this worker. Throws ElasticJobStopped naming the lost workers and the last committed
// step once fewer than min_workers remain. While it waits between generations, SIGTERM and
// SIGINT end the wait with StopRequested. Options that cannot make a job throw InvalidArgument
// before `train` is first called.
ElasticResult run_elastic(ElasticOptions options,
                          const std::function<void(ElasticContext&)>& train);

}  // namespace dist
