// dist-train's custom training loop (--loop custom): the tutorial's loop, written once against
// dist::Strategy and run under whichever strategy the flags choose.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/train/checkpoint.h"
#include "dist/train/elastic.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"
#include "dist/train/mixed_precision.h"
#include "dist/train/preemption.h"
#include "dist/train/progress_bar.h"
#include "dist/train/summary_writer.h"
#include "epoch_logs.h"
#include "model_file.h"
#include "task_options.h"
#include "train_job.h"

namespace dist::tools {
namespace {

using Clock = std::chrono::steady_clock;
using data::Element;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

namespace {

std::shared_ptr<MirroredOptimizer> make_optimizer(const Strategy& strategy,
                                                  const Mirrored<torch::nn::Sequential>& model,
                                                  const TrainOptions& options) {
  if (options.optimizer == OptimizerKind::kSgd)
    return strategy.mirror_optimizer<torch::optim::SGD>(model,
                                                        torch::optim::SGDOptions(options.lr));
  return strategy.mirror_optimizer<torch::optim::Adam>(model,
                                                       torch::optim::AdamOptions(options.lr));
}

// Reads the checkpoint to resume from. When the latest of a directory is damaged, the
// DataError says which older ones are kept and how to resume from one.
void read_for_resume(Checkpoint& checkpoint, const std::string& path,
                     const CheckpointManager* manager, const TrainOptions& options) {
  try {
    checkpoint.read(path, options.env);
  } catch (const DataError& e) {
    if (manager == nullptr || !options.resume_from.empty()) throw;
    std::string older;
    for (const auto& kept : manager->checkpoints())
      if (kept != path) older = kept;  // oldest first: the last one is the newest
    if (older.empty()) throw;
    throw DataError(detail::concat(e.what(), "; an older checkpoint is kept: run again with ",
                                   "--resume-from ", older, " to resume from it"));
  }
}

// InvalidArgument if the checkpoint's data position was counted in other units than this
// run's (another global batch, shuffle seed or number of examples).
void check_same_run(const std::map<std::string, std::string>& values, const std::string& path,
                    const JobSetup& job, const TrainOptions& options) {
  auto same = [&](const char* key, const char* flag, const std::string& now) {
    const auto it = values.find(key);
    if (it == values.end()) return;  // written before checkpoints recorded it
    DIST_CHECK_ARG(it->second == now, "the checkpoint ", path, " was written with ", flag, " ",
                   it->second, " but this run has ", now,
                   ": its data position would be replayed in other units. Resume with ", flag, " ",
                   it->second, ", or start afresh with a new --checkpoint-dir");
  };
  same("run.global_batch", "--global-batch", std::to_string(job.global_batch));
  same("run.seed", "--seed", std::to_string(options.seed));
  same("run.train_examples", "--train-examples", std::to_string(job.num_train));
}

// The custom training loop, once the job is set up: one loop for every strategy, whose steps
// run as the strategy runs them (StepRunner: at once on this process's replicas, or scheduled
// on the workers of a parameter-server job).
class CustomLoop {
 public:
  CustomLoop(const TrainOptions& options, JobSetup& job, const PreemptionWatcher& preemption,
             std::ostream& chief_out, ElasticContext* elastic);
  TrainResult run(Clock::time_point job_start);

 private:
  at::Tensor train_replica(const Element& b);
  std::unique_ptr<StepRunner> make_runner();
  // Resumes from --resume-from or the directory's latest checkpoint; the first epoch to run.
  int resume();
  void resumed_at(const std::string& from);
  // The training state at `position` into checkpoint_ (a collective: the metric sums).
  void fill_state(int64_t epoch, const data::IteratorPosition& position);
  void save(int64_t epoch, const data::IteratorPosition& position);
  // Elastic: the state at `position` to memory (every worker).
  void commit(int64_t epoch, const data::IteratorPosition& position);
  // After each completed step: the test's hook, and the recovery time after a resize.
  void after_step();
  void report_bytes_sent(int64_t steps_before);
  void evaluate();
  // Starts an epoch's metrics (a resumed epoch's sums on the chief).
  void begin_epoch(bool resuming);
  // Runs an epoch's steps; false when the run stops within it.
  bool train_epoch(int epoch, const std::optional<data::IteratorPosition>& resume_at,
                   int64_t& epoch_images);
  void report_epoch(int epoch, double epoch_seconds, double images_per_sec);
  // With --log-dir: a histogram of each weight in <log-dir>/train at step = epoch.
  void write_weight_histograms(int epoch);
  void report_if_finished(int first_epoch);
  void save_weights();
  std::map<std::string, std::string> metric_values() const;

  const TrainOptions& options_;
  JobSetup& job_;
  const Strategy& strategy_;
  const PreemptionWatcher& preemption_;
  std::ostream discard_{nullptr};
  std::ostream& out_;
  DistributedDataset test_data_;
  Mirrored<torch::nn::Sequential> model_;
  std::shared_ptr<MirroredOptimizer> optimizer_;
  int64_t train_bytes_sent_ = 0;   // by this worker, in train_epoch
  std::shared_ptr<Loss> loss_fn_;  // the task's per-example loss (task_options.h)
  mixed_precision::Policy precision_;
  metrics::Mean train_loss_{"train_loss"}, test_loss_{"test_loss"};
  // Accuracy, or the mean absolute error of a regression.
  TaskMetric train_metric_, test_metric_;
  std::unique_ptr<StepRunner> runner_;
  std::optional<EpochLogs> logs_;  // made when the loop runs
  std::optional<CheckpointManager> manager_;
  Checkpoint checkpoint_;
  std::optional<data::IteratorPosition> resume_at_;
  TrainResult result_;
  ElasticContext* elastic_;
};

Mirrored<torch::nn::Sequential> seeded_model(const Strategy& strategy, const TrainOptions& options,
                                             const JobSetup& job) {
  return strategy.mirror(make_job_model(options, job.model_file.get(), job.model_input));
}

CustomLoop::CustomLoop(const TrainOptions& options, JobSetup& job,
                       const PreemptionWatcher& preemption, std::ostream& chief_out,
                       ElasticContext* elastic)
    : options_(options),
      job_(job),
      strategy_(job.strategy),
      preemption_(preemption),
      out_(job.chief ? chief_out : discard_),
      test_data_(job.strategy.experimental_distribute_dataset(job.test)),
      model_(seeded_model(job.strategy, options, job)),
      optimizer_(make_optimizer(job.strategy, model_, options)),
      loss_fn_(task_loss(options.task.kind)),
      precision_(options.mixed_precision),
      train_metric_(options.task.kind, "train_" + task_metric_name(options.task.kind)),
      test_metric_(options.task.kind, "test_" + task_metric_name(options.task.kind)),
      checkpoint_(model_, optimizer_.get()),
      elastic_(elastic) {
  result_.chief = job.chief;
  result_.strategy = strategy_.name();
  result_.num_replicas_in_sync = job.replicas;
  result_.global_batch = job.global_batch;
  result_.mixed_precision = mixed_precision::policy_name(precision_);
  result_.metric_name = task_metric_name(options.task.kind);
  // PowerSGD's error feedback: without it a resumed run would differ from an uninterrupted one.
  if (options.communication_hook)
    checkpoint_.add("communication_hook", options.communication_hook, strategy_);
}

// One replica's share of a training step.
at::Tensor CustomLoop::train_replica(const Element& b) {
  auto logits =
      mixed_precision::forward_in_policy([&] { return model_->forward(b[0]); }, precision_);
  auto loss = compute_average_loss((*loss_fn_)(b[1], logits));
  loss.backward();
  optimizer_->apply_gradients();
  train_metric_.update_state(b[1], logits.detach());
  return loss.detach();
}

std::unique_ptr<StepRunner> CustomLoop::make_runner() {
  return strategy_.make_step_runner(TrainStep(
      "dist-train/train_step", job_.train,
      [this](const PerReplica<Element>& batch) {
        model_.train();
        auto losses = strategy_.run([this](const Element& b) { return train_replica(b); }, batch);
        train_loss_.update_state(strategy_.reduce(ReduceOp::kSum, losses));
      },
      metric_step_sums({&train_loss_, &train_metric_.metric()})));
}

// Checkpoints: every worker reads the latest (the directory must be shared, as in TensorFlow);
// only the chief writes, except at --sharding parameters, where every worker writes its piece. The
// partial epoch's metric sums travel along, so a resumed epoch reports what an uninterrupted one
// would.
int CustomLoop::resume() {
  if (!options_.checkpoint_dir.empty())
    manager_.emplace(options_.checkpoint_dir, options_.max_to_keep, options_.env);
  if (elastic_ && elastic_->track(checkpoint_, out_)) {
    result_.steps = checkpoint_.state.step;
    result_.resumed_at_step = elastic_->resumed_at_step();
    resume_at_ = checkpoint_.state.position;
    return static_cast<int>(resume_at_->epoch);
  }
  std::optional<std::string> path;
  if (!options_.resume_from.empty())
    path = options_.resume_from;
  else if (manager_)
    path = manager_->latest();
  if (!path) return 0;
  read_for_resume(checkpoint_, *path, manager_ ? &*manager_ : nullptr, options_);
  check_same_run(checkpoint_.state.values, *path, job_, options_);
  resumed_at(*path);
  if (elastic_) elastic_->set_resumed_at_step(result_.resumed_at_step);
  return static_cast<int>(resume_at_->epoch);
}

void CustomLoop::resumed_at(const std::string& from) {
  result_.steps = result_.resumed_at_step = checkpoint_.state.step;
  resume_at_ = checkpoint_.state.position;
  out_ << "Resumed from " << from << " at step " << result_.steps << " (epoch "
       << resume_at_->epoch + 1 << ", batch " << resume_at_->elements << ")" << std::endl;
}

std::map<std::string, std::string> CustomLoop::metric_values() const {
  std::map<std::string, std::string> values;
  for (const Metric* m :
       std::initializer_list<const Metric*>{&train_loss_, &train_metric_.metric()}) {
    auto [total, count] = m->total_and_count();  // a collective: every worker calls it
    values[m->name() + ".total"] = nlohmann::json(total).dump();
    values[m->name() + ".count"] = nlohmann::json(count).dump();
  }
  return values;
}

void CustomLoop::fill_state(int64_t epoch, const data::IteratorPosition& position) {
  checkpoint_.state.step = result_.steps;
  checkpoint_.state.epoch = epoch;
  checkpoint_.state.position = position;
  checkpoint_.state.values = metric_values();
  // What the data position is counted in: a resume with other values would misplace it.
  checkpoint_.state.values["run.global_batch"] = std::to_string(job_.global_batch);
  checkpoint_.state.values["run.seed"] = std::to_string(options_.seed);
  checkpoint_.state.values["run.train_examples"] = std::to_string(job_.num_train);
  checkpoint_.gather_worker_states();  // every worker: the hook's state is each one's own
}

void CustomLoop::save(int64_t epoch, const data::IteratorPosition& position) {
  fill_state(epoch, position);
  if (job_.chief || checkpoint_.written_in_pieces())
    result_.last_checkpoint = manager_->save(checkpoint_);
}

void CustomLoop::commit(int64_t epoch, const data::IteratorPosition& position) {
  fill_state(epoch, position);
  elastic_->commit();
}

void CustomLoop::after_step() {
  if (options_.after_step) options_.after_step(result_.steps);
  if (elastic_) elastic_->step_completed(result_.steps);
}

void CustomLoop::evaluate() {
  model_.eval();
  for (const auto& batch : test_data_.iterator(0)) {
    strategy_.run(
        [&](const Element& b) {
          torch::NoGradGuard no_grad;
          auto logits =
              mixed_precision::forward_in_policy([&] { return model_->forward(b[0]); }, precision_);
          test_loss_.update_state((*loss_fn_)(b[1], logits));
          test_metric_.update_state(b[1], logits);
        },
        batch);
  }
}

void CustomLoop::begin_epoch(bool resuming) {
  for (Metric* m : std::initializer_list<Metric*>{&train_loss_, &train_metric_.metric(),
                                                  &test_loss_, &test_metric_.metric()})
    m->reset_state();
  if (!resuming || !job_.chief) return;
  auto value = [&](const std::string& key) {
    auto it = checkpoint_.state.values.find(key);
    return it == checkpoint_.state.values.end() ? 0.0 : std::stod(it->second);
  };
  for (Metric* m : std::initializer_list<Metric*>{&train_loss_, &train_metric_.metric()})
    m->restore_state(value(m->name() + ".total"), value(m->name() + ".count"));
}

// A checkpoint (every --checkpoint-every steps, at --max-steps, on a signal) is written once no
// step runs, so it holds the weights of the step count it records: where steps run ahead of
// the loop, none starts past a due checkpoint until the running ones have completed.
bool CustomLoop::train_epoch(int epoch, const std::optional<data::IteratorPosition>& resume_at,
                             int64_t& epoch_images) {
  const int64_t every = options_.checkpoint_every, max_steps = options_.max_steps;
  auto steps =
      runner_->epoch(epoch, job_.steps_per_epoch > 0 ? job_.steps_per_epoch : -1, resume_at);
  ProgressBar bar(out_, steps->steps(), job_.chief && ProgressBar::stdout_is_terminal());
  int64_t epoch_steps = resume_at ? resume_at->elements : 0, saved_at = -1;
  bool stopping = false, at_max = false;
  const StepGate gate = [&](int64_t, int64_t running) {
    const int64_t after = result_.steps + running;  // the step count once the running complete
    if (max_steps > 0 && after >= max_steps) return NextStep::kStop;
    if (every > 0 && after % every == 0) return NextStep::kAfterRunningSteps;
    if (elastic_ && elastic_->boundary_due(after)) return NextStep::kAfterRunningSteps;
    return NextStep::kStart;
  };
  while (auto done = steps->next(gate, stopping)) {
    epoch_steps += done->count;
    result_.steps += done->count;
    epoch_images += done->examples;
    // local_result: progress is the chief's alone and must not be a collective.
    if (options_.progress && job_.chief)
      bar.update(epoch_steps, "loss: " + fixed(train_loss_.local_result(), 4) + " - " +
                                  result_.metric_name + ": " +
                                  fixed(train_metric_.metric().local_result(), 4));
    // Agreed by all workers, so they stop at the same step.
    result_.interrupted = result_.interrupted || strategy_.any_worker(preemption_.requested());
    at_max = max_steps > 0 && result_.steps >= max_steps;
    stopping = result_.interrupted || at_max;
    const bool due = stopping || (every > 0 && result_.steps % every == 0);
    if (manager_ && due && steps->running() == 0 && saved_at != result_.steps) {
      save(epoch, steps->position());
      saved_at = result_.steps;
    }
    if (elastic_ && elastic_->boundary_due(result_.steps) && steps->running() == 0) {
      commit(epoch, steps->position());
      result_.regroup = elastic_->regroup_now(stopping);
      stopping = stopping || result_.regroup;
    }
    after_step();
  }
  bar.finish();
  return !stopping;
}

void CustomLoop::report_epoch(int epoch, double epoch_seconds, double images_per_sec) {
  logs_->report(epoch, result_, epoch_seconds, images_per_sec);
  write_weight_histograms(epoch);
  logs_->flush();
}

void CustomLoop::write_weight_histograms(int epoch) {
  if (options_.log_dir.empty()) return;
  model_.variables().gather_values();  // every worker: --sharding parameters keeps shares
  SummaryWriter* summary = logs_->train_summary();
  if (summary == nullptr) return;
  model_.variables().prepare_to_read();  // under ParameterServerStrategy: from the ps tasks
  for (const std::string& refused :
       summary->weight_histograms(named_weights_of(*model_.primary()), epoch))
    std::cerr << "dist-train: no histogram at epoch " << epoch + 1 << ": " << refused << std::endl;
}

void CustomLoop::save_weights() {
  if (options_.save_weights.empty() && options_.save_torchscript.empty()) return;
  model_.variables().gather_values();  // every worker: --sharding parameters keeps chunks
  if (!job_.chief) return;
  model_.variables().prepare_to_read();  // under ParameterServerStrategy: from the ps tasks
  save_trained_model(options_, *model_.primary(),
                     {{"model", name_of(options_.model)}, {"step", std::to_string(result_.steps)}});
}

// What this worker sent to the others per step of this run's training epochs (with any
// checkpoint taken inside them), by the library's own count (communication_counters.h;
// evaluation is left out: at --sharding parameters each of its batches gathers the whole model).
void CustomLoop::report_bytes_sent(int64_t steps_before) {
  const int64_t steps = result_.steps - steps_before;
  if (strategy_.num_workers() < 2 || steps <= 0) return;
  result_.bytes_sent_per_step = train_bytes_sent_ / steps;
  out_ << "Bytes sent per step per worker: " << result_.bytes_sent_per_step << " (library counter, "
       << steps << " steps)" << std::endl;
}

// A finished job run again: say so, and report what the trained weights score.
void CustomLoop::report_if_finished(int first_epoch) {
  const bool at_max_already = options_.max_steps > 0 && result_.steps >= options_.max_steps;
  if (first_epoch < options_.epochs && !at_max_already) return;
  out_ << "Nothing left to train: the checkpoint is at step " << result_.steps << ", the end of "
       << (at_max_already ? "--max-steps " + std::to_string(options_.max_steps)
                          : "--epochs " + std::to_string(options_.epochs))
       << " (raise it, or use a new --checkpoint-dir to train afresh); evaluating" << std::endl;
  evaluate();
  result_.epochs = std::min(first_epoch, options_.epochs);
  result_.train_loss = result_.train_metric = std::nan("");  // no training in this run
  result_.test_loss = test_loss_.result();
  result_.test_metric = test_metric_.metric().result();
}

TrainResult CustomLoop::run(Clock::time_point job_start) {
  runner_ = make_runner();
  if (!runner_->runs_loop()) {
    runner_->serve();  // a ps or worker task: the chief's steps, until it ends the job
    result_.chief = false;
    result_.interrupted = preemption_.requested();  // SIGTERM while serving: exit 4
    return result_;
  }
  logs_.emplace(options_, job_.chief, out_);
  const int first_epoch = resume();
  // Every worker must take the same steps: compare what decides them before the first one.
  strategy_.check_workers_agree(step_settings(options_, job_, result_.resumed_at_step));
  if (options_.before_first_step) options_.before_first_step();
  if (resume_at_) report_if_finished(first_epoch);
  const int64_t steps_before = result_.steps;
  int64_t images = 0;
  for (int epoch = first_epoch; epoch < options_.epochs; ++epoch) {
    if (options_.max_steps > 0 && result_.steps >= options_.max_steps) break;
    const bool resuming = resume_at_ && resume_at_->epoch == epoch;
    begin_epoch(resuming);
    out_ << "Epoch " << epoch + 1 << "/" << options_.epochs << std::endl;
    model_.train();
    const auto epoch_start = Clock::now();
    const int64_t bytes_before = strategy_.extended().communication_counters().bytes_sent;
    int64_t epoch_images = 0;
    const bool epoch_complete =
        train_epoch(epoch, resuming ? resume_at_ : std::nullopt, epoch_images);
    train_bytes_sent_ += strategy_.extended().communication_counters().bytes_sent - bytes_before;
    if (result_.regroup) return result_;  // the next generation goes on from this step
    if (result_.interrupted) {
      out_ << "Stopped by signal " << preemption_.signal_number() << " after step " << result_.steps
           << (manager_ ? "; checkpoint saved, rerun the same command to resume"
                        : "; nothing saved (no --checkpoint-dir)")
           << std::endl;
      break;
    }
    const double epoch_train_seconds = seconds_since(epoch_start);
    result_.train_seconds += epoch_train_seconds;
    images += epoch_images;
    evaluate();
    result_.epochs = epoch + 1;
    result_.train_loss = train_loss_.result();
    result_.train_metric = train_metric_.metric().result();
    result_.test_loss = test_loss_.result();
    result_.test_metric = test_metric_.metric().result();
    report_epoch(epoch, seconds_since(epoch_start),
                 epoch_images / std::max(epoch_train_seconds, 1e-9));
    // A stop at --max-steps saved its mid-epoch position above; do not skip the epoch's rest.
    if (manager_ && epoch_complete) save(epoch + 1, data::IteratorPosition{epoch + 1, 0});
    if (elastic_ && epoch_complete) commit(epoch + 1, data::IteratorPosition{epoch + 1, 0});
  }
  report_bytes_sent(steps_before);
  save_weights();
  report_peak_memory(strategy_, result_, out_);
  report_ignored_errors(job_, result_, out_);
  result_.images_per_sec = images / std::max(result_.train_seconds, 1e-9);
  result_.seconds = seconds_since(job_start);
  result_.communication = strategy_.extended().communication_counters();
  return result_;
}

}  // namespace

TrainResult run_custom_loop(const TrainOptions& options, JobSetup& job,
                            const PreemptionWatcher& preemption, std::ostream& chief_out,
                            Clock::time_point job_start, ElasticContext* elastic) {
  return failing_together(job.strategy, [&] {
    return CustomLoop(options, job, preemption, chief_out, elastic).run(job_start);
  });
}

}  // namespace dist::tools
