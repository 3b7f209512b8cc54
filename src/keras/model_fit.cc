// Model::fit (dist/keras/model.h): the epochs and steps as the strategy's step runner runs
// them, the callbacks around them, stopping and resuming.
#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "dist/keras/model.h"
#include "keras/model_state.h"

namespace dist::keras {
namespace {

using data::Element;
using detail::all_metrics;
using detail::CallbackList;
using detail::check_compiled;
using detail::check_element;
using detail::make_callbacks;
using detail::metric_logs;
using detail::ModelState;
using detail::replica_forward;
using detail::replica_loss;
using detail::reset_metrics;
using detail::run_test;
using detail::set_training;
using detail::track_loss;

// One training step on this process's shares of a global batch (under
// ParameterServerStrategy: a worker's batch), with the loss and metric updates of the step.
void train_step(ModelState& s, const PerReplica<Element>& batch) {
  set_training(s, true);
  auto losses = s.strategy.run(
      [&](const Element& b) {
        check_element(b, 2, "fit");
        at::Tensor y_pred = replica_forward(s, b[0]);
        at::Tensor loss = replica_loss(*s.loss, b[1], y_pred);
        loss.backward();
        s.optimizer->apply_gradients();
        at::Tensor detached = y_pred.detach();
        for (auto& m : s.metrics) m.update(*m.metric, b[1], detached);
        return loss.detach();
      },
      batch);
  track_loss(s, losses, batch.global_batch_size());
}

// An epoch's start: fresh metrics (or a resumed epoch's sums), the learning rate it began
// with, on_epoch_begin. Returns whether the epoch continues a resumed one.
bool begin_epoch(ModelState& s, int epoch, const std::optional<TrainingState>& resume,
                 const CallbackList& callbacks) {
  const bool resuming = resume && resume->epoch == epoch && resume->position.elements > 0;
  reset_metrics(s);
  if (resuming && s.strategy.is_chief()) {
    // Under several workers the sums were saved globally: one worker holds them.
    for (Metric* m : all_metrics(s)) {
      auto total = resume->values.find(m->name() + ".total");
      auto count = resume->values.find(m->name() + ".count");
      if (total != resume->values.end() && count != resume->values.end())
        m->restore_state(std::stod(total->second), std::stod(count->second));
    }
  }
  // The learning rate the epoch started with: a schedule that reads the current rate must
  // see that one again when a resume repeats on_epoch_begin, not the rate it already set.
  if (resuming) {
    if (auto lr = resume->values.find("lr_at_epoch_begin"); lr != resume->values.end())
      s.optimizer->set_learning_rate(std::stod(lr->second));
  }
  s.progress.values["lr_at_epoch_begin"] = nlohmann::json(s.optimizer->learning_rate()).dump();
  callbacks.each([&](Callback& c) { c.on_epoch_begin(epoch, {}); });
  return resuming;
}

// A complete epoch's end: its logs (validation included), on_epoch_end, the history.
void end_epoch(ModelState& s, int epoch, const std::optional<DistributedDataset>& validation,
               const FitOptions& options, const CallbackList& callbacks, History& history,
               Logs& logs) {
  logs = metric_logs(s, /*global=*/true);
  if (validation) {
    for (const auto& [key, value] : run_test(s, *validation, options.validation_steps, callbacks))
      logs["val_" + key] = value;
  }
  // The next epoch starts at its beginning: what a checkpoint taken at epoch end records.
  s.progress.epoch = epoch + 1;
  s.progress.position = data::IteratorPosition{epoch + 1, 0};
  callbacks.each([&](Callback& c) { c.on_epoch_end(epoch, logs); });
  history.epoch.push_back(epoch);
  for (const auto& [key, value] : logs) history.history[key].push_back(value);
}

// One epoch's steps as the strategy runs them. As in Keras, a step whose on_train_batch_begin
// asks to stop still runs (fit stops after its on_train_batch_end, where BackupAndRestore saves
// it); where steps run ahead of the loop (parameter servers) on_train_batch_begin runs as a
// step is scheduled, and a stop asked for there keeps that step from being scheduled (how
// dist-train's --max-steps is exact there). The steps still running when fit stops are all
// taken before the callbacks hear of the last one, so a checkpoint written then holds exactly
// the steps it records. Returns whether the epoch ran all its steps.
bool run_epoch_steps(ModelState& s, EpochSteps& steps, const CallbackList& callbacks) {
  const bool steps_run_ahead = s.strategy.step_schedule().steps_ahead > 1;
  const StepGate gate = [&](int64_t step, int64_t) {
    if (s.stop_training) return NextStep::kStop;
    callbacks.each([&](Callback& c) { c.on_train_batch_begin(step, {}); });
    return s.stop_training && steps_run_ahead ? NextStep::kStop : NextStep::kStart;
  };
  while (auto done = steps.next(gate, /*stopping=*/s.stop_training)) {
    s.progress.step += done->count;
    s.progress.position = steps.position();
    Logs batch_logs = metric_logs(s, /*global=*/false);
    callbacks.each([&](Callback& c) { c.on_train_batch_end(done->last, batch_logs); });
  }
  return steps.complete();
}

// fit's epochs, from s.progress (a fresh start or a resumed state) to options.epochs. A stop
// within an epoch (preemption, or a user's callback) ends fit there: the epoch is not
// complete, so it gets no validation and no on_epoch_end (a resume completes it). A stop after
// the epoch's last step lets the epoch end as usual.
void run_epochs(ModelState& s, StepRunner& runner,
                const std::optional<DistributedDataset>& validation, const FitOptions& options,
                const std::optional<TrainingState>& resume, const CallbackList& callbacks,
                History& history, Logs& logs) {
  if (s.stop_training) return;  // a callback stopped it in on_train_begin (a step limit reached)
  for (int epoch = static_cast<int>(s.progress.epoch); epoch < options.epochs; ++epoch) {
    const bool resuming = begin_epoch(s, epoch, resume, callbacks);
    if (s.stop_training) break;  // before any step: nothing of this epoch happened
    set_training(s, true);
    auto steps = runner.epoch(epoch, options.steps_per_epoch,
                              resuming ? std::optional(resume->position) : std::nullopt);
    s.progress.epoch = epoch;
    s.progress.position = steps->position();
    if (!run_epoch_steps(s, *steps, callbacks)) break;
    end_epoch(s, epoch, validation, options, callbacks, history, logs);
    if (s.stop_training) break;
  }
}

// The step runner of this fit. Where the job's other tasks serve one runner (parameter
// servers), the model keeps it, so that those tasks (and the variables on them) outlive fit.
std::shared_ptr<StepRunner> make_fit_runner(ModelState& s, const data::Dataset& train,
                                            const FitOptions& options) {
  const StepSchedule schedule = s.strategy.step_schedule();
  if (schedule.epoch_is_step_count) {
    const int64_t batches = train.cardinality();
    DIST_CHECK_ARG(options.steps_per_epoch > 0, "fit: under ", s.strategy.extended().describe(),
                   " steps_per_epoch is required (as in TensorFlow): every worker iterates its "
                   "own copy of the data, repeated, so the data's end does not end an epoch. Set "
                   "FitOptions::steps_per_epoch",
                   batches > 0
                       ? ::dist::detail::concat(", e.g. to ", batches,
                                                " (the dataset's batches) for one pass per epoch")
                       : std::string());
  }
  if (schedule.one_runner_per_job) {
    DIST_CHECK_ARG(!s.made_the_jobs_runner, "fit: model '", s.name, "' was fitted under ",
                   s.strategy.extended().describe(),
                   " already; fit runs once per job there (the job's other tasks serve the first "
                   "fit until the chief's model is destroyed): train longer with more epochs in "
                   "one fit");
    s.made_the_jobs_runner = true;
  }
  std::shared_ptr<StepRunner> runner = s.strategy.make_step_runner(TrainStep(
      "keras.fit/train_step", train,
      [&s](const PerReplica<Element>& batch) { train_step(s, batch); },
      metric_step_sums(all_metrics(s))));
  if (schedule.one_runner_per_job && runner->runs_loop()) s.kept_runner = runner;
  return runner;
}

}  // namespace

History Model::fit(const data::Dataset& train, const FitOptions& options) {
  ModelState& s = *state_;
  check_compiled(s, "fit");
  DIST_CHECK_ARG(options.epochs >= 0 && options.initial_epoch >= 0, "fit: epochs (", options.epochs,
                 ") and initial_epoch (", options.initial_epoch, ") must not be negative");
  DIST_CHECK_ARG(options.steps_per_epoch == -1 || options.steps_per_epoch >= 1,
                 "fit: steps_per_epoch must be at least 1, or -1 for the whole dataset; got ",
                 options.steps_per_epoch);
  DIST_CHECK_ARG(options.validation_steps == -1 || options.validation_steps >= 1,
                 "fit: validation_steps must be at least 1, or -1 for all; got ",
                 options.validation_steps);
  const std::shared_ptr<StepRunner> runner = make_fit_runner(s, train, options);
  if (!runner->runs_loop()) {
    runner->serve();  // a ps or worker task: the chief's steps, until it ends the job
    return History{};
  }
  std::optional<DistributedDataset> validation;
  if (options.validation_data)
    validation = s.strategy.experimental_distribute_dataset(*options.validation_data);

  int64_t steps = options.steps_per_epoch;
  if (const int64_t batches = train.cardinality();
      batches >= 0 && !s.strategy.step_schedule().epoch_is_step_count)
    steps = steps < 0 ? batches : std::min(steps, batches);
  CallbackList callbacks = make_callbacks(this, options.callbacks, options.verbose, options.out,
                                          {{"epochs", options.epochs},
                                           {"steps", static_cast<double>(steps)},
                                           {"verbose", options.verbose}});

  s.stop_training = false;
  s.resume.reset();
  s.progress = TrainingState{};
  s.progress.epoch = options.initial_epoch;
  s.progress.position = data::IteratorPosition{options.initial_epoch, 0};
  History history;
  Logs logs;
  try {
    callbacks.each([](Callback& c) { c.on_train_begin({}); });
    // A callback (BackupAndRestore) may have asked to continue from a saved state.
    const std::optional<TrainingState> resume = std::move(s.resume);
    s.resume.reset();
    if (resume) s.progress = *resume;
    run_epochs(s, *runner, validation, options, resume, callbacks, history, logs);
  } catch (...) {
    callbacks.each([](Callback& c) { c.on_train_abort(); });
    throw;
  }
  callbacks.each([&](Callback& c) { c.on_train_end(logs); });
  return history;
}

}  // namespace dist::keras
