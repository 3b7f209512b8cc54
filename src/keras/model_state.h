// What a Model holds (dist/keras/model.h keeps it behind a pointer), and the pieces of a step
// that fit (model_fit.cc), evaluate and predict (model_inference.cc) share: a replica's
// forward and loss, the metrics' bookkeeping, the callbacks. Private to src/keras.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/keras/model.h"
#include "dist/train/metrics.h"
#include "dist/train/mixed_precision.h"
#include "keras/graph_module.h"

namespace dist::keras::detail {

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

// InvalidArgument naming `what` (the call) unless compile() has run.
void check_compiled(const ModelState& s, const char* what);
// InvalidArgument naming `what` unless `element` holds at least `at_least` tensors.
void check_element(const data::Element& element, size_t at_least, const char* what);

void set_training(ModelState& s, bool on);
// The calling replica's copy applied to x (the primary outside run()).
// Under the model's mixed precision policy (mixed_precision.h), with float32 outputs.
at::Tensor replica_forward(ModelState& s, const at::Tensor& x);
// The loss a replica differentiates: summed or averaged over the GLOBAL batch (see model.h).
at::Tensor replica_loss(const Loss& loss, const at::Tensor& y_true, const at::Tensor& y_pred);

void reset_metrics(ModelState& s);
// The loss tracker, then the compiled metrics.
std::vector<Metric*> all_metrics(ModelState& s);
// Logs from every process's metrics (a collective) or this process's only.
Logs metric_logs(const ModelState& s, bool global, const std::string& prefix = "");
// One step's loss metric update: the global mean loss, weighted by the global batch.
void track_loss(ModelState& s, const PerReplica<at::Tensor>& losses, int64_t global_batch);

// Calls f on the model's callbacks in order.
struct CallbackList {
  std::vector<std::shared_ptr<Callback>> callbacks;
  template <class F>
  void each(F&& f) const {
    for (const auto& callback : callbacks) f(*callback);
  }
};

// The progress bar (verbose > 0, on the chief), then the user's callbacks, each given the
// model and `params`.
CallbackList make_callbacks(Model* model, const std::vector<std::shared_ptr<Callback>>& user,
                            int verbose, std::ostream* out, const Logs& params);

// Runs the data through the model without training; fills the compiled metrics (evaluate,
// and fit's validation).
Logs run_test(ModelState& s, const DistributedDataset& data, int64_t steps,
              const CallbackList& callbacks);

}  // namespace dist::keras::detail
