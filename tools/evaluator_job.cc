#include "evaluator_job.h"

#include <chrono>
#include <iomanip>
#include <optional>
#include <sstream>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "dist/data/mnist.h"
#include "dist/distribute/cluster_resolver.h"
#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/strategy.h"
#include "dist/keras/model.h"
#include "dist/keras/optimizers.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"
#include "dist/train/mixed_precision.h"
#include "dist/train/sidecar_evaluator.h"
#include "epoch_logs.h"
#include "model_file.h"
#include "strategy_factory.h"

namespace dist::tools {
namespace {

using Clock = std::chrono::steady_clock;

// What to restore and how to evaluate it, for one --loop.
struct EvaluatedModel {
  Checkpoint checkpoint;
  SidecarEvaluator::Evaluate evaluate;
};

// The custom loop's model and test evaluation (CustomLoop::evaluate, on one device):
// the same batches and precision, so the chief's last test figures are reproduced.
EvaluatedModel custom_loop_model(const TrainOptions& options, const data::Dataset& test,
                                 const ModelFile* file) {
  torch::nn::Sequential model = make_job_model(options, file);
  const auto precision = options.mixed_precision;
  auto evaluate = [model, test, precision]() mutable {
    SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, Reduction::kNone);
    metrics::Mean loss("test_loss");
    metrics::SparseCategoricalAccuracy accuracy("test_accuracy");
    model->eval();
    torch::NoGradGuard no_grad;
    for (const auto& batch : test.iterator(0)) {
      auto logits =
          mixed_precision::forward_in_policy([&] { return model->forward(batch[0]); }, precision);
      loss.update_state(loss_fn(batch[1], logits));
      accuracy.update_state(batch[1], logits);
    }
    return std::map<std::string, double>{{"loss", loss.result()}, {"accuracy", accuracy.result()}};
  };
  // The optimizer's state in the file is left unread: evaluation needs the weights only.
  return {Checkpoint(model.ptr(), nullptr), evaluate};
}

// The fit loop's: its checkpoints are BackupAndRestore's (model and optimizer), read into the
// same Keras model compiled alike on one device.
EvaluatedModel fit_loop_model(const TrainOptions& options, const data::Dataset& test,
                              const ModelFile* file) {
  keras::Model model = make_job_keras_model(options, file);
  model.compile(get_default_strategy(), make_keras_optimizer(options),
                SparseCategoricalCrossentropy(true), {"accuracy"});
  model.set_dtype_policy(options.mixed_precision);  // as the chief's fit validates
  auto evaluate = [model, test]() mutable {
    keras::EvaluateOptions quiet;
    quiet.verbose = 0;
    const keras::Logs logs = model.evaluate(test, quiet);
    return std::map<std::string, double>{{"loss", logs.at("loss")},
                                         {"accuracy", logs.at("accuracy")}};
  };
  return {model.checkpoint(), evaluate};
}

// The job's last step, counted as the chief counts it (prepare_job), where the strategy has
// one replica in sync (a worker's step of `global_batch`).
int64_t job_final_step(const TrainOptions& options, int64_t global_batch) {
  const data::Dataset examples = data::fashion_mnist_bytes(options.data_dir, data::Split::kTrain,
                                                           Env::Default(), options.train_examples);
  const int64_t steps_per_epoch =
      parameter_server_steps_per_epoch(options, examples.cardinality(), global_batch);
  const int64_t final_step = options.epochs * steps_per_epoch;
  return options.max_steps > 0 ? std::min(final_step, options.max_steps) : final_step;
}

}  // namespace

bool is_evaluator_task(const TrainOptions& options) {
  if (options.strategy != StrategyKind::kParameterServer) return false;
  // A parameter-server job's cluster is TF_CONFIG's alone (Slurm and MPI start workers only):
  // without it this is no evaluator, and the strategy says what is missing.
  const EnvironmentVariables env = process_environment();
  const auto tf_config = env.find("TF_CONFIG");
  if (tf_config == env.end() || tf_config->second.empty()) return false;
  return TFConfigClusterResolver().task().type == "evaluator";
}

EvaluatorResult run_evaluator(const TrainOptions& options, std::ostream& out) {
  const auto start = Clock::now();
  check_options(options);
  DIST_CHECK_ARG(!options.checkpoint_dir.empty(),
                 "the evaluator task evaluates the checkpoints the chief writes: give every task "
                 "the same --checkpoint-dir");
  const auto timeout = whole_milliseconds("--evaluator-timeout", options.evaluator_timeout);
  set_parameter_server_task_threads(options, TFConfigClusterResolver().config());

  const int64_t global_batch = global_batch_of(options, /*replicas=*/1);
  const int64_t final_step = job_final_step(options, global_batch);
  const data::Dataset test = data::fashion_mnist_bytes(options.data_dir, data::Split::kTest)
                                 .batch(global_batch)
                                 .map(data::scale_images_of);

  std::optional<ModelFile> file;
  if (!options.model_file.empty()) file = load_model_file(options, inspect_training_data(options));
  const ModelFile* model_file = file ? &*file : nullptr;
  EvaluatedModel evaluated = options.loop == Loop::kFit
                                 ? fit_loop_model(options, test, model_file)
                                 : custom_loop_model(options, test, model_file);
  SidecarEvaluatorOptions sidecar;
  sidecar.checkpoint_dir = options.checkpoint_dir;
  if (!options.log_dir.empty()) sidecar.log_dir = options.log_dir + "/evaluation";
  sidecar.final_step = final_step;
  sidecar.timeout = timeout;
  sidecar.env = options.env;
  out << "Evaluator: evaluating the checkpoints in " << options.checkpoint_dir
      << " on the test set until step " << final_step
      << (sidecar.log_dir.empty() ? "" : "; TensorBoard scalars in " + sidecar.log_dir)
      << std::endl;

  SidecarEvaluator evaluator(evaluated.checkpoint, evaluated.evaluate, sidecar);
  auto last_end = Clock::now();
  const auto evaluations = evaluator.run([&](const Evaluation& e) {
    const auto now = Clock::now();
    out << "Evaluated " << e.checkpoint << " (step " << e.step << " of " << final_step
        << "): test loss " << fixed(e.metrics.at("loss"), 4) << " - test accuracy "
        << fixed(e.metrics.at("accuracy"), 4) << " - "
        << fixed(std::chrono::duration<double>(now - last_end).count(), 1) << "s" << std::endl;
    last_end = now;
  });

  EvaluatorResult result;
  result.evaluations = static_cast<int64_t>(evaluations.size());
  result.final_step = final_step;
  const Evaluation& last = evaluations.back();  // run() returns at the final step, never empty
  result.step = last.step;
  result.checkpoint = last.checkpoint;
  result.test_loss = last.metrics.at("loss");
  result.test_accuracy = last.metrics.at("accuracy");
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

std::string to_json_line(const EvaluatorResult& r) {
  return nlohmann::json{{"task", "evaluator"},
                        {"evaluations", r.evaluations},
                        {"final_step", r.final_step},
                        {"step", r.step},
                        {"checkpoint", r.checkpoint},
                        {"test_loss", r.test_loss},
                        {"test_accuracy", r.test_accuracy},
                        {"seconds", r.seconds}}
      .dump();
}

}  // namespace dist::tools
