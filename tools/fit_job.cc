// dist-train --loop fit: the main job through keras::Model::fit.
#include <algorithm>
#include <chrono>
#include <optional>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/data/mnist.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/elastic_callback.h"
#include "dist/train/mixed_precision.h"
#include "dist/train/preemption.h"
#include "model_file.h"
#include "task_options.h"
#include "train_job.h"

namespace dist::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Times the training part of each epoch (validation excluded, as the custom loop measures it)
// and counts its images, for images/s; remembers where the last complete epoch ended.
class TrainTimer : public keras::Callback {
 public:
  TrainTimer(int64_t global_batch, int64_t examples_per_epoch)
      : global_batch_(global_batch), examples_per_epoch_(examples_per_epoch) {}

  void on_epoch_begin(int, const keras::Logs&) override {
    start_ = Clock::now();
    steps_ = 0;
    timing_ = true;
  }
  void on_train_batch_end(int64_t, const keras::Logs&) override { ++steps_; }
  void on_test_begin(const keras::Logs&) override { stop(); }
  void on_epoch_end(int, keras::Logs&) override {
    stop();
    last_epoch_end_step = model().global_step();
  }
  void on_train_end(const keras::Logs&) override { stop(); }  // an epoch cut short

  double seconds = 0;
  int64_t images = 0;
  int64_t last_epoch_end_step = -1;

 private:
  void stop() {
    if (!timing_) return;
    timing_ = false;
    seconds += std::chrono::duration<double>(Clock::now() - start_).count();
    images += std::min(steps_ * global_batch_, examples_per_epoch_);
  }

  int64_t global_batch_, examples_per_epoch_;
  Clock::time_point start_;
  int64_t steps_ = 0;
  bool timing_ = false;
};

// Stops fit after --max-steps global steps; every worker counts the same steps.
class StopAtStep : public keras::Callback {
 public:
  explicit StopAtStep(int64_t max_steps) : max_steps_(max_steps) {}
  // A resumed run that already reached the limit takes no further step (on_epoch_begin: the
  // resumed step is known only after every on_train_begin).
  void on_epoch_begin(int, const keras::Logs&) override {
    epoch_begin_step_ = model().global_step();
    first_batch_ = -1;
    if (model().global_step() >= max_steps_) model().set_stop_training(true);
  }
  // Under ParameterServerStrategy fit calls this as it schedules a step, before earlier steps
  // have finished: a stop here keeps the step past the limit from being scheduled at all.
  void on_train_batch_begin(int64_t batch, const keras::Logs&) override {
    if (first_batch_ < 0) first_batch_ = batch;  // a resumed epoch starts past 0
    if (epoch_begin_step_ + (batch - first_batch_) >= max_steps_) model().set_stop_training(true);
  }
  void on_train_batch_end(int64_t, const keras::Logs&) override {
    if (model().global_step() >= max_steps_) model().set_stop_training(true);
  }

 private:
  int64_t max_steps_;
  int64_t epoch_begin_step_ = 0, first_batch_ = -1;
};

// After each training step (and after its commit): the test's hook (TrainOptions::after_step).
class AfterStep : public keras::Callback {
 public:
  explicit AfterStep(const TrainOptions& options) : options_(options) {}
  void on_train_batch_end(int64_t, const keras::Logs&) override {
    options_.after_step(model().global_step());
  }

 private:
  const TrainOptions& options_;
};

// The callbacks fit_options makes that the job reads after fit.
struct JobCallbacks {
  std::shared_ptr<TrainTimer> timer;
  std::shared_ptr<keras::callbacks::BackupAndRestore> backup;  // --checkpoint-dir; else null
  std::shared_ptr<keras::callbacks::Elastic> elastic;          // an elastic generation; else null
};

// fit's options for the job: the test set as validation data, and the callbacks the flags ask
// for; `elastic`: the generation of an elastic job this fit runs (null otherwise).
keras::FitOptions fit_options(const TrainOptions& options, const JobSetup& job, std::ostream& out,
                              ElasticContext* elastic, JobCallbacks& made) {
  keras::FitOptions fit;
  fit.epochs = options.epochs;
  if (job.steps_per_epoch > 0) fit.steps_per_epoch = job.steps_per_epoch;  // parameter_server
  fit.validation_data = job.test;
  fit.verbose = options.progress ? 1 : 2;
  fit.out = &out;
  made.timer = std::make_shared<TrainTimer>(job.global_batch, job.num_train);
  fit.callbacks.push_back(made.timer);
  // Before BackupAndRestore: a stop at --max-steps is then saved by it.
  if (options.max_steps > 0)
    fit.callbacks.push_back(std::make_shared<StopAtStep>(options.max_steps));
  if (!options.checkpoint_dir.empty()) {
    // Kept after a complete run, as the custom loop keeps its checkpoints.
    made.backup = std::make_shared<keras::callbacks::BackupAndRestore>(
        options.checkpoint_dir, options.checkpoint_every, /*delete_checkpoint=*/false,
        options.max_to_keep);
    fit.callbacks.push_back(made.backup);
  }
  if (elastic) {
    // After BackupAndRestore: a commit wins over the directory's backup.
    made.elastic = std::make_shared<keras::callbacks::Elastic>(*elastic, out, made.backup);
    fit.callbacks.push_back(made.elastic);
  }
  if (options.after_step) fit.callbacks.push_back(std::make_shared<AfterStep>(options));
  if (!options.log_dir.empty()) {
    fit.callbacks.push_back(std::make_shared<keras::callbacks::TensorBoard>(
        options.log_dir, /*update_freq=*/0, /*histogram_freq=*/1));
    fit.callbacks.push_back(std::make_shared<keras::callbacks::CSVLogger>(
        options.log_dir + "/metrics.csv", ',', /*append=*/true));
  }
  return fit;
}

// What BackupAndRestore did (a resume, a stop by a signal) into `result`, said on `out`.
void report_backup(const keras::callbacks::BackupAndRestore& backup, const TrainOptions& options,
                   TrainResult& result, std::ostream& out, const ElasticContext* elastic) {
  // An elastic job's later generations restore the backup too, before the newer commit: the
  // step the job resumed from is the one its commits carry (keras::callbacks::Elastic).
  result.resumed_at_step = elastic ? elastic->resumed_at_step() : backup.resumed_at_step();
  result.interrupted = backup.interrupted();
  result.last_checkpoint = backup.last_saved();
  if (result.resumed_at_step >= 0 && !elastic)  // an elastic job said it as it resumed
    out << "Resumed from " << options.checkpoint_dir << " at step " << result.resumed_at_step
        << std::endl;
  if (result.interrupted)
    out << "Stopped by signal " << backup.signal_number() << " after step " << result.steps
        << "; checkpoint saved, rerun the same command to resume" << std::endl;
}

// The losses and metrics (accuracy or mae) of the last epoch; after a stop at --max-steps within an
// epoch (which had no validation), those of the test set for what was trained.
void report_scores(keras::Model& model, const keras::History& history, const JobSetup& job,
                   const TrainTimer& timer, TrainResult& result) {
  const std::string& metric = result.metric_name;  // as compiled (fit_job)
  if (!history.epoch.empty()) {
    result.epochs = history.epoch.back() + 1;
    result.train_loss = history.history.at("loss").back();
    result.train_metric = history.history.at(metric).back();
    result.test_loss = history.history.at("val_loss").back();
    result.test_metric = history.history.at("val_" + metric).back();
  } else {
    // This fit completed no epoch (it resumed within its last one: a backup, or an elastic
    // generation): the epochs done before, and the training figures of the epoch so far.
    const TrainingState state = model.training_state();  // a collective, as evaluate below
    auto mean = [&](const std::string& metric) {
      const auto total = state.values.find(metric + ".total");
      const auto count = state.values.find(metric + ".count");
      if (total == state.values.end() || count == state.values.end()) return 0.0;
      const double n = std::stod(count->second);
      return n > 0 ? std::stod(total->second) / n : 0.0;
    };
    result.epochs = static_cast<int>(state.epoch);
    result.train_loss = mean("loss");
    result.train_metric = mean(metric);
  }
  if (!result.interrupted && timer.last_epoch_end_step != result.steps) {
    keras::EvaluateOptions evaluate;
    evaluate.verbose = 0;
    keras::Logs logs = model.evaluate(job.test, evaluate);
    result.test_loss = logs["loss"];
    result.test_metric = logs[metric];
  }
}

// --save-weights and --save-torchscript: the built-in model's weights by fit's names, a scripted
// module's by its own (model_file.h).
void save_fit_model(keras::Model& model, const TrainOptions& options, bool chief) {
  if (options.save_weights.empty() && options.save_torchscript.empty()) return;
  model.gather_weights();  // every worker: --sharding parameters keeps shares
  if (!chief) return;
  if (options.model_file.empty()) {
    model.save_weights(options.save_weights);
    return;
  }
  model.weights();  // under ParameterServerStrategy: reads the values from the ps tasks
  save_trained_model(options, *model.module(), {});
}

// `elastic`: the generation of an elastic job this fit runs (null otherwise).
TrainResult fit_job(const TrainOptions& options, JobSetup& job, std::ostream& chief_out,
                    Clock::time_point job_start, ElasticContext* elastic) {
  const Strategy& strategy = job.strategy;
  // Every worker must take the same steps. (Where BackupAndRestore resumes from is not part of
  // it: each worker restores inside fit; the directory must be shared.)
  strategy.check_workers_agree(step_settings(options, job, -1));
  if (options.before_first_step) options.before_first_step();
  const bool chief = job.chief;
  std::ostream discard(nullptr);
  std::ostream& out = chief ? chief_out : discard;

  torch::manual_seed(options.seed);
  keras::Model model = make_job_keras_model(options, job.model_file.get(), job.model_input);
  model.compile(strategy, make_keras_optimizer(options), task_loss(options.task.kind),
                {task_metric_name(options.task.kind)});
  model.set_dtype_policy(options.mixed_precision);
  if (chief) model.summary(out);

  JobCallbacks made;
  // A ps or worker task only serves the chief inside fit, where no callback runs: a watcher of
  // its own makes a SIGTERM end the serving at once with exit 4, as in the custom loop.
  std::optional<PreemptionWatcher> serving_preemption;
  if (job.steps_per_epoch > 0 && !chief) serving_preemption.emplace();
  const keras::History history =
      model.fit(job.train, fit_options(options, job, out, elastic, made));

  TrainResult result;
  result.chief = chief;
  result.strategy = strategy.name();
  result.regroup = made.elastic && made.elastic->regrouping();
  if (result.regroup) return result;  // the next generation goes on from this step
  // A ps or worker task: fit served the chief until it ended the job; the results are the
  // chief's (and the ps tasks are gone, so nothing more can be read here).
  if (job.steps_per_epoch > 0 && !chief) {
    result.interrupted = serving_preemption->requested();
    return result;
  }
  result.num_replicas_in_sync = job.replicas;
  result.global_batch = job.global_batch;
  result.mixed_precision = mixed_precision::policy_name(options.mixed_precision);
  result.metric_name = task_metric_name(options.task.kind);
  result.steps = model.global_step();
  if (made.backup) report_backup(*made.backup, options, result, out, elastic);
  report_scores(model, history, job, *made.timer, result);
  save_fit_model(model, options, chief);
  result.train_seconds = made.timer->seconds;
  result.images_per_sec = made.timer->images / std::max(made.timer->seconds, 1e-9);
  report_peak_memory(strategy, result, out);
  report_ignored_errors(job, result, out);
  result.seconds = std::chrono::duration<double>(Clock::now() - job_start).count();
  result.communication = strategy.extended().communication_counters();
  return result;
}

}  // namespace

keras::Optimizer make_keras_optimizer(const TrainOptions& options) {
  if (options.optimizer == OptimizerKind::kSgd) return keras::optimizers::SGD(options.lr);
  return keras::optimizers::Adam(options.lr);
}

TrainResult run_fit_training(const TrainOptions& options, std::ostream& chief_out) {
  const auto job_start = Clock::now();
  JobSetup job = start_job(options, chief_out);
  return failing_together(job.strategy,
                          [&] { return fit_job(options, job, chief_out, job_start, nullptr); });
}

TrainResult run_fit_generation(const TrainOptions& options, JobSetup& job, std::ostream& chief_out,
                               Clock::time_point job_start, ElasticContext& elastic) {
  return failing_together(job.strategy,
                          [&] { return fit_job(options, job, chief_out, job_start, &elastic); });
}

}  // namespace dist::tools
