// StepRunner: how a strategy runs the steps of a training loop, so that one loop serves every
// strategy. keras::Model::fit and dist-train's custom loop are such loops.
//
// A synchronous strategy (one device, Mirrored, CentralStorage, MultiWorkerMirrored) runs each
// step at once on this process's replicas, over this process's shares of one global batch.
// ParameterServerStrategy's runner schedules the steps on the workers, several ahead of the
// oldest unfinished one, each worker training on its own repeated copy of the data; its ps
// and worker tasks serve instead of looping. The loop is the same:
//
//   dist::TrainStep step("my_loop/train", train_batches,      // global batches
//       [&](const dist::PerReplica<dist::data::Element>& batch) {
//         train_loss.update_state(strategy.reduce(dist::ReduceOp::kSum,
//                                                 strategy.run(replica_step, batch)));
//       },
//       dist::metric_step_sums({&train_loss, &train_accuracy}));   // metric.h
//   auto runner = strategy.make_step_runner(std::move(step));
//   if (!runner->runs_loop()) return runner->serve();   // ps and worker tasks of a ps job
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     auto steps = runner->epoch(epoch, steps_per_epoch);
//     while (auto done = steps->next([](int64_t, int64_t) { return dist::NextStep::kStart; }))
//       ...;                                          // done->count steps have completed
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/core/per_replica.h"
#include "dist/data/dataset.h"

namespace dist {

// The values a step adds to, as numbers that can be summed (a metric's total and count). Where
// a step runs on another process, that process resets them, runs the step and reads them; the
// process running the loop adds what was read to its own. Unused by synchronous strategies,
// whose steps update this process's values directly.
struct StepSums {
  std::function<void()> reset;
  std::function<std::vector<double>()> read;
  std::function<void(const std::vector<double>&)> add;
};

// One training step, as every process of the job knows it (they all run the same binary and
// make their runners in the same order).
struct TrainStep {
  TrainStep(std::string name, data::Dataset data,
            std::function<void(const PerReplica<data::Element>&)> run, StepSums sums = {})
      : name(std::move(name)), data(std::move(data)), run(std::move(run)), sums(std::move(sums)) {}

  // Unique in the process: where steps run on other processes, it is registered under this
  // name on every task.
  std::string name;
  // The global batches to train on. Under ParameterServerStrategy each worker repeats its own
  // copy, started i/N of the way into the first pass.
  data::Dataset data;
  // Trains on one batch: this process's per-replica shares of a global batch (call
  // strategy.run with it), or under ParameterServerStrategy a worker's whole batch, as a
  // PerReplica of one whose global_batch_size() is its rows.
  std::function<void(const PerReplica<data::Element>&)> run;
  // What run() adds to, for steps that run elsewhere (empty functions: nothing to carry).
  StepSums sums;
};

// What the loop says before a step starts.
enum class NextStep {
  kStart,              // start it now
  kAfterRunningSteps,  // start it once every running step has completed (a checkpoint is due)
  kStop,               // start no more steps in this epoch
};

// A step about to start: its index in the epoch (counting from 0 at the epoch's start, a
// resumed epoch's first step included) and how many started steps have not completed yet.
using StepGate = std::function<NextStep(int64_t step, int64_t running)>;

// Steps that completed, oldest first.
struct CompletedSteps {
  int64_t count = 0;     // 1, or every step that was running when the loop asked to stop
  int64_t last = 0;      // the index in the epoch of the last of them
  int64_t examples = 0;  // the examples they trained on
};

// The steps of one epoch.
class EpochSteps {
 public:
  virtual ~EpochSteps() = default;
  // Starts steps while `gate` allows it (within the runner's window and the epoch's steps;
  // `gate` is called just before each start, once its data is at hand), then waits for the
  // oldest running step and returns it. With `stopping` (or once the gate said kStop), starts
  // none and returns every running step at once, so that the loop hears of a stop only when
  // nothing runs. nullopt when nothing runs and nothing may start: the epoch's end, or a stop.
  // Rethrows what a step failed with.
  virtual std::optional<CompletedSteps> next(const StepGate& gate, bool stopping = false) = 0;
  // Started steps that have not completed.
  virtual int64_t running() const = 0;
  // Where the data is once the completed steps are counted: what a checkpoint saves to resume
  // at the next step.
  virtual data::IteratorPosition position() const = 0;
  // The epoch's steps, or a negative cardinality when only the data's end tells.
  virtual int64_t steps() const = 0;
  // Whether every step of the epoch has completed (the data ran out or the count was reached).
  virtual bool complete() const = 0;
};

// What a loop must know of how a strategy runs steps, as capabilities.
struct StepSchedule {
  // Steps that may run ahead of the loop: 1 when each completes before the next starts. When
  // more, a step's result reaches the loop after later steps have changed the variables, so
  // what the loop saves between steps may hold more steps than it records.
  int64_t steps_ahead = 1;
  // An epoch is a number of steps, not a pass of the data (each worker repeats its own copy
  // of it): the loop must give the epoch's steps.
  bool epoch_is_step_count = false;
  // The job's other tasks serve one runner until it is destroyed: make one per job and keep
  // it as long as the variables are read (they live on those tasks).
  bool one_runner_per_job = false;
  // Each step is one worker's, run apart from the other workers' steps: there is no global
  // batch across workers (a layer that would share statistics over it sees its own batch).
  bool workers_step_apart = false;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // Whether this process runs the loop; false on a ParameterServerStrategy job's ps and worker
  // tasks, which serve() instead.
  virtual bool runs_loop() const = 0;
  // On a process that does not run the loop: serves the steps until the loop's process ends
  // the job, or until a PreemptionWatcher catches SIGTERM or SIGINT (it returns; the watcher
  // says why). CollectiveError when that process falls silent for the strategy's timeout.
  virtual void serve() = 0;
  // The steps of `epoch`: `steps_per_epoch` of them (a negative value: until the data ends;
  // required where the schedule says epoch_is_step_count), or what remains of them from
  // `resume_at` (a position of the same epoch, saved by an earlier run).
  virtual std::unique_ptr<EpochSteps> epoch(
      int64_t epoch, int64_t steps_per_epoch,
      const std::optional<data::IteratorPosition>& resume_at = std::nullopt) = 0;
};

}  // namespace dist
