#include "dist/keras/model.h"

#include <deque>
#include <functional>

#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "dist/keras/callbacks.h"
#include "dist/train/metrics.h"
#include "dist/train/mixed_precision.h"
#include "dist/train/safetensors.h"
#include "graph_module.h"

namespace dist::keras {
namespace detail {

// A metric compile() made from its name, and how fit feeds it.
struct CompiledMetric {
  std::unique_ptr<Metric> metric;
  std::function<void(Metric&, const at::Tensor& y_true, const at::Tensor& y_pred)> update;
};

struct ModelState {
  std::string name;
  std::shared_ptr<const Graph> graph;
  GraphModule module{nullptr};  // the primary copy
  Strategy strategy = get_default_strategy();
  std::optional<Mirrored<GraphModule>> mirrored;  // set by compile()
  std::shared_ptr<MirroredOptimizer> optimizer;
  std::shared_ptr<const Loss> loss;
  std::unique_ptr<metrics::Mean> loss_tracker;
  std::vector<CompiledMetric> metrics;
  bool stop_training = false;
  mixed_precision::Policy policy = mixed_precision::global_policy();
  TrainingState progress;               // where fit is
  std::optional<TrainingState> resume;  // set from on_train_begin by resume_training_at
  // Under a strategy whose other tasks serve one step runner per job (parameter servers):
  // whether fit made it, and on the task running the loop the runner itself, kept so that
  // those tasks (and the variables on them) outlive fit.
  bool made_the_jobs_runner = false;
  std::shared_ptr<StepRunner> kept_runner;
};

}  // namespace detail

namespace {

using data::Element;
using detail::CompiledMetric;
using detail::ModelState;

CompiledMetric make_metric(const std::string& name, const Loss& loss) {
  CompiledMetric m;
  if (name == "accuracy" || name == "acc" || name == "sparse_categorical_accuracy") {
    DIST_CHECK_ARG(
        loss.name() == "sparse_categorical_crossentropy" || name == "sparse_categorical_accuracy",
        "metric '", name, "' with loss '", loss.name(),
        "': only sparse categorical accuracy is available; use it with "
        "SparseCategoricalCrossentropy (integer labels)");
    m.metric = std::make_unique<metrics::SparseCategoricalAccuracy>(name);
    m.update = [](Metric& metric, const at::Tensor& y, const at::Tensor& p) {
      static_cast<metrics::SparseCategoricalAccuracy&>(metric).update_state(y, p);
    };
  } else if (name == "mae" || name == "mean_absolute_error") {
    m.metric = std::make_unique<metrics::MeanAbsoluteError>(name);
    m.update = [](Metric& metric, const at::Tensor& y, const at::Tensor& p) {
      static_cast<metrics::MeanAbsoluteError&>(metric).update_state(y, p);
    };
  } else {
    throw InvalidArgument("unknown metric '" + name +
                          "': use accuracy, sparse_categorical_accuracy or mae");
  }
  return m;
}

void check_element(const Element& element, size_t at_least, const char* what) {
  DIST_CHECK_ARG(element.size() >= at_least, what, " needs dataset elements of ",
                 at_least == 2 ? "(x, y)" : "(x) or (x, y)", ", got an element of ", element.size(),
                 " tensors");
}

// Calls f on the model's callbacks in order.
struct CallbackList {
  std::vector<std::shared_ptr<Callback>> callbacks;
  template <class F>
  void each(F&& f) const {
    for (const auto& callback : callbacks) f(*callback);
  }
};

CallbackList make_callbacks(Model* model, const std::vector<std::shared_ptr<Callback>>& user,
                            int verbose, std::ostream* out, const Logs& params) {
  DIST_CHECK_ARG(verbose >= 0 && verbose <= 2, "verbose must be 0, 1 or 2, got ", verbose);
  CallbackList list;
  // As in Keras, the progress bar comes first, so it prints an epoch before the others act.
  if (verbose > 0 && model->is_chief())
    list.callbacks.push_back(std::make_shared<ProgbarLogger>(out ? *out : std::cout));
  for (const auto& callback : user) {
    DIST_CHECK_ARG(callback != nullptr, "callbacks: a callback is null");
    list.callbacks.push_back(callback);
  }
  for (const auto& callback : list.callbacks) {
    callback->set_model(model);
    callback->set_params(params);
  }
  return list;
}

}  // namespace

Model& Callback::model() const {
  DIST_CHECK_ARG(model_ != nullptr,
                 "this callback has no model yet; pass it to fit, evaluate "
                 "or predict");
  return *model_;
}

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name)
    : Model(inputs, outputs, std::move(name), /*sequential=*/false) {}

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name,
             bool sequential)
    : state_(std::make_shared<ModelState>()) {
  state_->name = std::move(name);
  state_->graph = detail::Graph::trace(inputs.node(), outputs.node(), sequential);
  state_->module = detail::GraphModule(state_->graph);
}

Model Sequential(const Shape& input_shape, const std::vector<Layer>& layers, std::string name) {
  DIST_CHECK_ARG(!layers.empty(), "Sequential '", name, "' needs at least one layer");
  KerasTensor input = Input(input_shape);
  KerasTensor x = input;
  for (const Layer& layer : layers) x = layer(x);
  return Model(input, x, std::move(name), /*sequential=*/true);
}

const std::string& Model::name() const { return state_->name; }
bool Model::compiled() const { return state_->mirrored.has_value(); }
mixed_precision::Policy Model::dtype_policy() const { return state_->policy; }
void Model::set_dtype_policy(mixed_precision::Policy policy) {
  mixed_precision::check_supported(policy);
  state_->policy = policy;
}
const Strategy& Model::strategy() const { return state_->strategy; }
bool Model::is_chief() const { return state_->strategy.is_chief(); }
void Model::set_stop_training(bool stop) { state_->stop_training = stop; }
bool Model::stop_training() const { return state_->stop_training; }
std::shared_ptr<torch::nn::Module> Model::module() const { return state_->module.ptr(); }

void Model::compile(const Strategy& strategy, const Optimizer& optimizer,
                    std::shared_ptr<const Loss> loss, const std::vector<std::string>& metrics) {
  ModelState& s = *state_;
  DIST_CHECK_ARG(loss != nullptr, "compile: the loss is null");
  DIST_CHECK_ARG(optimizer.make != nullptr, "compile: the optimizer '", optimizer.name,
                 "' has no make function");
  if (s.mirrored) {
    // The copies (and, across workers, the gradient hooks) belong to the first strategy.
    DIST_CHECK_ARG(&s.strategy.extended() == &strategy.extended(), "compile: model '", s.name,
                   "' was compiled under ", s.strategy.extended().describe(),
                   " and cannot move to ", strategy.extended().describe(),
                   "; build a new model under the new strategy");
  }
  // Everything is made before anything is kept, so a failed compile leaves the model as it was.
  std::vector<CompiledMetric> compiled_metrics;
  for (const std::string& name : metrics) compiled_metrics.push_back(make_metric(name, *loss));
  std::optional<Mirrored<detail::GraphModule>> mirrored = s.mirrored;
  if (!mirrored) mirrored.emplace(strategy.mirror(s.module));
  std::unique_ptr<torch::optim::Optimizer> made;
  try {
    made = optimizer.make(mirrored->variables().trainable_variables());
  } catch (const c10::Error& e) {
    throw InvalidArgument("compile: optimizer '" + optimizer.name +
                          "' rejected its options: " + e.what_without_backtrace());
  }
  DIST_CHECK_ARG(made != nullptr, "compile: optimizer '", optimizer.name, "' made nothing");
  s.strategy = strategy;
  s.mirrored = std::move(mirrored);
  s.optimizer =
      std::make_shared<MirroredOptimizer>(s.mirrored->shared_variables(), std::move(made));
  s.loss = std::move(loss);
  s.loss_tracker = std::make_unique<metrics::Mean>("loss");
  s.metrics = std::move(compiled_metrics);
}

namespace {

void check_compiled(const ModelState& s, const char* what) {
  DIST_CHECK_ARG(s.mirrored.has_value(), what, ": model '", s.name,
                 "' is not compiled; call compile(strategy, optimizer, loss, metrics) first");
}

void set_training(ModelState& s, bool on) { s.mirrored->train(on); }

// The calling replica's copy applied to x (the primary outside run()).
// Under the model's mixed precision policy (mixed_precision.h), with float32 outputs.
at::Tensor replica_forward(ModelState& s, const at::Tensor& x) {
  return mixed_precision::forward_in_policy([&] { return s.mirrored->operator->()->forward(x); },
                                            s.policy);
}

void reset_metrics(ModelState& s) {
  s.loss_tracker->reset_state();
  for (auto& m : s.metrics) m.metric->reset_state();
}

// The loss a replica differentiates: summed or averaged over the GLOBAL batch (see model.h).
at::Tensor replica_loss(const Loss& loss, const at::Tensor& y_true, const at::Tensor& y_pred) {
  at::Tensor per_example = loss.unreduced(y_true, y_pred);
  if (loss.reduction() == Reduction::kSum) return per_example.sum();
  return compute_average_loss(per_example);
}

// Logs from every process's metrics (a collective) or this process's only.
Logs metric_logs(const ModelState& s, bool global, const std::string& prefix = "") {
  Logs logs;
  logs[prefix + "loss"] = global ? s.loss_tracker->result() : s.loss_tracker->local_result();
  for (const auto& m : s.metrics)
    logs[prefix + m.metric->name()] = global ? m.metric->result() : m.metric->local_result();
  return logs;
}

std::vector<Metric*> all_metrics(ModelState& s) {
  std::vector<Metric*> all{s.loss_tracker.get()};
  for (auto& m : s.metrics) all.push_back(m.metric.get());
  return all;
}

// One step's loss metric update: the global mean loss, weighted by the global batch.
void track_loss(ModelState& s, const PerReplica<at::Tensor>& losses, int64_t global_batch) {
  at::Tensor total = s.strategy.reduce(ReduceOp::kSum, losses);
  s.loss_tracker->update_state(total, torch::tensor(static_cast<double>(global_batch)));
}

// Runs the data through the model without training; fills the compiled metrics.
Logs run_test(ModelState& s, const DistributedDataset& data, int64_t steps,
              const CallbackList& callbacks) {
  reset_metrics(s);
  callbacks.each([](Callback& c) { c.on_test_begin({}); });
  set_training(s, false);
  int64_t step = 0;
  auto it = data.iterator(0);
  while (steps < 0 || step < steps) {
    auto batch = it.next();
    if (!batch) break;
    callbacks.each([&](Callback& c) { c.on_test_batch_begin(step, {}); });
    auto losses = s.strategy.run(
        [&](const Element& b) {
          check_element(b, 2, "evaluate");
          torch::NoGradGuard no_grad;
          at::Tensor y_pred = replica_forward(s, b[0]);
          for (auto& m : s.metrics) m.update(*m.metric, b[1], y_pred);
          return replica_loss(*s.loss, b[1], y_pred);
        },
        *batch);
    track_loss(s, losses, batch->global_batch_size());
    Logs logs = metric_logs(s, /*global=*/false);
    callbacks.each([&](Callback& c) { c.on_test_batch_end(step, logs); });
    ++step;
  }
  Logs logs = metric_logs(s, /*global=*/true);
  callbacks.each([&](Callback& c) { c.on_test_end(logs); });
  return logs;
}

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

namespace {

// evaluate's and predict's common start: checked options, the distributed data, the callbacks.
std::pair<DistributedDataset, CallbackList> start_inference(Model* model, ModelState& s,
                                                            const data::Dataset& data,
                                                            const EvaluateOptions& options,
                                                            const char* what) {
  check_compiled(s, what);
  DIST_CHECK_ARG(options.steps == -1 || options.steps >= 1, what,
                 ": steps must be at least 1, or -1 for all; got ", options.steps);
  auto distributed = s.strategy.experimental_distribute_dataset(data);
  int64_t steps = distributed.cardinality() >= 0 ? distributed.cardinality() : -1;
  if (options.steps > 0) steps = steps < 0 ? options.steps : std::min(steps, options.steps);
  CallbackList callbacks =
      make_callbacks(model, options.callbacks, options.verbose, options.out,
                     {{"steps", static_cast<double>(steps)}, {"verbose", options.verbose}});
  return {std::move(distributed), std::move(callbacks)};
}

}  // namespace

Logs Model::evaluate(const data::Dataset& data, const EvaluateOptions& options) {
  auto [distributed, callbacks] = start_inference(this, *state_, data, options, "evaluate");
  return run_test(*state_, distributed, options.steps, callbacks);
}

at::Tensor Model::predict(const data::Dataset& data, const EvaluateOptions& options) {
  ModelState& s = *state_;
  auto [distributed, callbacks] = start_inference(this, s, data, options, "predict");
  callbacks.each([](Callback& c) { c.on_predict_begin({}); });
  set_training(s, false);
  std::vector<at::Tensor> outputs;
  int64_t step = 0;
  auto it = distributed.iterator(0);
  while (options.steps < 0 || step < options.steps) {
    auto batch = it.next();
    if (!batch) break;
    callbacks.each([&](Callback& c) { c.on_predict_batch_begin(step, {}); });
    auto predictions = s.strategy.run(
        [&](const Element& b) {
          check_element(b, 1, "predict");
          torch::NoGradGuard no_grad;
          return replica_forward(s, b[0]);
        },
        *batch);
    outputs.push_back(s.strategy.gather(predictions, 0));
    callbacks.each([&](Callback& c) { c.on_predict_batch_end(step, {}); });
    ++step;
  }
  callbacks.each([](Callback& c) { c.on_predict_end({}); });
  DIST_CHECK_ARG(!outputs.empty(), "predict: the dataset is empty");
  return torch::cat(outputs, 0);
}

at::Tensor Model::operator()(const at::Tensor& x) const {
  if (state_->mirrored) state_->mirrored->variables().prepare_to_read();
  torch::NoGradGuard no_grad;
  auto& module = *state_->module;
  const bool was_training = module.is_training();
  module.eval();
  at::Tensor y =
      mixed_precision::forward_in_policy([&] { return module.forward(x); }, state_->policy);
  module.train(was_training);
  return y;
}

double Model::learning_rate() const {
  check_compiled(*state_, "learning_rate");
  return state_->optimizer->learning_rate();
}

void Model::set_learning_rate(double learning_rate) {
  check_compiled(*state_, "set_learning_rate");
  DIST_CHECK_ARG(std::isfinite(learning_rate) && learning_rate >= 0,
                 "learning rate must be a finite non-negative number, got ", learning_rate);
  state_->optimizer->set_learning_rate(learning_rate);
}

std::vector<std::pair<std::string, at::Tensor>> Model::weights() const {
  // Under ParameterServerStrategy the current values are on the ps tasks.
  if (state_->mirrored) state_->mirrored->variables().prepare_to_read();
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& item : state_->module->named_parameters())
    weights.emplace_back(item.key(), item.value());
  for (const auto& item : state_->module->named_buffers())
    if (item.value().is_floating_point()) weights.emplace_back(item.key(), item.value());
  return weights;
}

void Model::set_weights(const std::vector<std::pair<std::string, at::Tensor>>& weights) {
  // Check everything before changing anything. Every worker calls it (prepare_to_write below is
  // a collective where the strategy keeps shares), so the shapes may be read whole here.
  if (state_->mirrored) state_->mirrored->variables().gather_values();
  std::map<std::string, at::Tensor> by_name(weights.begin(), weights.end());
  const auto own = this->weights();
  for (const auto& [name, tensor] : own) {
    auto it = by_name.find(name);
    DIST_CHECK_ARG(it != by_name.end(), "set_weights: model '", state_->name, "' has weight '",
                   name, "' but no value was given for it");
    DIST_CHECK_ARG(it->second.sizes() == tensor.sizes(), "set_weights: weight '", name,
                   "' has shape ", tensor.sizes(), " but the value has shape ", it->second.sizes());
  }
  DIST_CHECK_ARG(by_name.size() == own.size(), "set_weights: ", by_name.size(), " values for the ",
                 own.size(), " weights of model '", state_->name,
                 "'; a name does not belong to the model");
  torch::NoGradGuard no_grad;
  // Into the primary module; the strategy's placement follows.
  if (state_->mirrored) state_->mirrored->variables().prepare_to_write();
  const auto& module = state_->module;
  for (const auto& item : module->named_parameters()) item.value().copy_(by_name.at(item.key()));
  for (const auto& item : module->named_buffers())
    if (item.value().is_floating_point()) item.value().copy_(by_name.at(item.key()));
  if (state_->mirrored) state_->mirrored->variables().sync_from_primary();
}

void Model::gather_weights() {
  if (state_->mirrored) state_->mirrored->variables().gather_values();
}

int64_t Model::weight_numel(const at::Tensor& weight) const {
  if (!state_->mirrored) return weight.numel();
  int64_t numel = 1;
  for (int64_t size : state_->mirrored->variables().parameter_sizes(weight)) numel *= size;
  return numel;
}

void Model::save_weights(const std::string& path) const {
  save_safetensors(path, weights(), {{"format", "dist.keras.weights/1"}, {"model", name()}});
}

void Model::load_weights(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  try {
    set_weights(file.tensors);
  } catch (const InvalidArgument& e) {
    throw DataError(path + ": " + e.what());
  }
}

Checkpoint Model::checkpoint() const {
  check_compiled(*state_, "checkpoint");
  Checkpoint checkpoint(*state_->mirrored, state_->optimizer.get());
  // A hook with state (PowerSGD's error feedback) must resume where it stopped too.
  if (auto hook = state_->strategy.extended().communication_hook())
    checkpoint.add("communication_hook", std::move(hook), state_->strategy);
  return checkpoint;
}

TrainingState Model::training_state() const {
  TrainingState state = state_->progress;
  if (state_->loss_tracker) {
    for (Metric* m : all_metrics(*state_)) {
      auto [total, count] = m->total_and_count();  // a collective: every worker calls it
      state.values[m->name() + ".total"] = nlohmann::json(total).dump();
      state.values[m->name() + ".count"] = nlohmann::json(count).dump();
    }
  }
  return state;
}

int64_t Model::global_step() const { return state_->progress.step; }

void Model::resume_training_at(const TrainingState& state) { state_->resume = state; }

}  // namespace dist::keras
