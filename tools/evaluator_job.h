// dist-train on the evaluator task of a parameter-server job (TF_CONFIG task type "evaluator"):
// TensorFlow's sidecar evaluation. No strategy: it watches --checkpoint-dir, evaluates each new
// checkpoint the chief writes on the test set, writes the results as TensorBoard scalars in
// --log-dir/evaluation, and exits after the checkpoint of the job's last step.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "train_job.h"

namespace dist::tools {

// Whether this process is the evaluator task: --strategy parameter_server and TF_CONFIG's task
// type "evaluator". False without TF_CONFIG (the strategy then says what is missing).
bool is_evaluator_task(const TrainOptions& options);

struct EvaluatorResult {
  int64_t evaluations = 0;  // checkpoints evaluated
  int64_t final_step = 0;   // the job's last step, the one it waited for
  int64_t step = 0;         // the step of the last checkpoint evaluated
  std::string checkpoint;   // its path
  double test_loss = 0;
  double test_accuracy = 0;
  double seconds = 0;  // the whole run, waiting included
};

// Evaluates the chief's checkpoints until the one of the last step (--epochs times the steps
// per epoch, or --max-steps if fewer), each on the whole test set as the chief evaluates
// (--loop custom: the model and the test batches of the custom loop; --loop fit: the Keras
// model's evaluate). InvalidArgument without --checkpoint-dir; DataError when no new checkpoint
// comes for --evaluator-timeout seconds before the last step, or one cannot be read.
EvaluatorResult run_evaluator(const TrainOptions& options, std::ostream& out);

// The result as the one-line JSON object dist-train prints last on the evaluator.
std::string to_json_line(const EvaluatorResult& result);

}  // namespace dist::tools
