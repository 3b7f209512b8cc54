// SidecarEvaluator: the evaluator task of a job (TensorFlow's sidecar evaluation). It runs beside
// training, in its own process, without a strategy: it reads each new checkpoint the chief
// writes into a directory, evaluates the model as restored, and writes the results as
// TensorBoard scalars, until the checkpoint of the last step.
//
//   torch::nn::Sequential model = make_model();
//   dist::SidecarEvaluatorOptions options;
//   options.checkpoint_dir = "ckpts";          // the chief's CheckpointManager directory
//   options.log_dir = "logs/evaluation";
//   options.final_step = epochs * steps_per_epoch;
//   dist::SidecarEvaluator evaluator(dist::Checkpoint(model.ptr(), nullptr),
//                                    [&] { return my_evaluate(model); }, options);
//   evaluator.run();
//
// Checkpoints are taken as they come, as TF's checkpoints_iterator does: when several appeared
// since the last evaluation only the latest is evaluated, and one deleted (max_to_keep) before
// it could be read is passed over. Training never waits for the evaluator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/train/checkpoint.h"

namespace dist {

struct SidecarEvaluatorOptions {
  std::string checkpoint_dir;  // where the chief's CheckpointManager writes
  // TensorBoard event files here (none if empty): per metric m, the scalar
  // "evaluation_<m>_vs_iterations" at step = the checkpoint's global step, as Keras names them.
  std::string log_dir;
  // Stop after evaluating a checkpoint of this global step or later; -1: no final step known.
  int64_t final_step = -1;
  // Stop after this many evaluations; -1: no limit.
  int64_t max_evaluations = -1;
  // Give up when no new checkpoint appears for this long. Without a final step or a limit on
  // evaluations this is how the evaluator ends, normally; with one it is a DataError (the chief
  // stopped before its last checkpoint).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // How often the directory is looked at while waiting.
  std::chrono::milliseconds poll_interval = std::chrono::milliseconds(200);
  Env* env = Env::Default();  // not owned
};

// One checkpoint evaluated.
struct Evaluation {
  std::string checkpoint;  // its path
  int64_t step = 0;        // its global step
  std::map<std::string, double> metrics;
};

class SidecarEvaluator {
 public:
  // The model's metrics ("loss", "accuracy", ...) on the evaluation data, computed from the
  // objects `checkpoint` restores.
  using Evaluate = std::function<std::map<std::string, double>()>;

  // `checkpoint` holds the objects to restore (a copy shares them): typically the model alone,
  // Checkpoint(model, nullptr), which leaves the optimizer's state in the file unread. The
  // random state is not restored. InvalidArgument naming the option when checkpoint_dir is
  // empty, final_step or max_evaluations is 0 or below -1, or a duration is not positive.
  SidecarEvaluator(Checkpoint checkpoint, Evaluate evaluate, SidecarEvaluatorOptions options);

  // Evaluates checkpoints until the final step, the limit of evaluations or the timeout (see
  // the options); calls `on_evaluation` after each. Returns every evaluation, in order.
  // DataError when the latest checkpoint cannot be read (naming it), when the log directory
  // cannot be written, or when the timeout passes before the final step or the limit.
  std::vector<Evaluation> run(const std::function<void(const Evaluation&)>& on_evaluation = {});

 private:
  Checkpoint checkpoint_;
  Evaluate evaluate_;
  SidecarEvaluatorOptions options_;
};

}  // namespace dist
