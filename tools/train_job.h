// The main job of dist-train: the tutorial's custom training loop on Fashion-MNIST, written
// once against dist::Strategy and run under whichever strategy the flags choose.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/data/dataset.h"
#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/input_context.h"
#include "dist/distribute/strategy.h"

namespace dist::keras {
struct Optimizer;
}

namespace dist::tools {

struct TrainOptions {
  std::string loop = "custom";        // custom (the tf.distribute custom loop) | fit (Keras)
  std::string strategy = "mirrored";  // default | one_device | mirrored | central_storage |
                                      // multi_worker (cluster from TF_CONFIG, Slurm or MPI) |
                                      // parameter_server (roles from TF_CONFIG)
  int replicas = 0;                   // 0: the strategy's default (mirrored: one per core)
  int threads = 0;                    // intra-op threads per replica; 0: cores / replicas
  std::string cross_device_ops;       // mirrored and central_storage only: parallel |
                                      // reduction_to_one_device | hierarchical_copy
  double collective_timeout = 300;    // multi_worker: seconds before a lost worker is reported
  double rendezvous_timeout = 120;    // multi_worker: seconds for all workers to join
  bool check_collectives = true;      // multi_worker: CommunicationOptions::check_collectives
  // The evaluator task (parameter_server): seconds without a new checkpoint before it gives up.
  double evaluator_timeout = 1800;
  int epochs = 10;
  int64_t max_steps = -1;  // global steps; -1: no limit
  // parameter_server only: steps scheduled per epoch (shared by all workers); -1: one pass of
  // the training data, ceil(examples / global batch).
  int64_t steps_per_epoch = -1;
  int64_t batch_per_replica = 64;
  int64_t global_batch = 0;  // > 0 overrides batch_per_replica * replicas
  double lr = 1e-3;
  std::string optimizer = "adam";  // adam | sgd
  std::string model = "cnn";       // cnn | mlp
  // Compute precision (mixed_precision.h): float32 | bf16 (mixed_bfloat16) | fp16 (GPU only).
  std::string mixed_precision = "float32";
  uint64_t seed = 42;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t train_examples = -1;   // use only the first N training examples; -1: all
  std::string checkpoint_dir;    // resumable checkpoints; resumes from the latest one here
  std::string resume_from;       // a checkpoint file to resume from instead of the latest
  int64_t checkpoint_every = 0;  // also save every K global steps (0: epoch ends and stops)
  int max_to_keep = 3;           // checkpoints kept in checkpoint_dir
  std::string log_dir;           // per-epoch metrics as JSON lines
  std::string save_weights;      // final weights as safetensors
  bool progress = true;          // progress bar / lines within each epoch
  // The custom loop's checkpoints and --save-weights go through it (not owned); the crash tests
  // pass one that kills the process mid-save. The fit loop's Keras callbacks use the default.
  Env* env = Env::Default();
};

struct TrainResult {
  bool chief = true;  // false on the other workers of a multi-worker job
  std::string strategy;
  int num_replicas_in_sync = 0;
  int64_t global_batch = 0;
  int epochs = 0;
  int64_t steps = 0;
  double seconds = 0;         // wall time of the whole job, evaluation included
  double train_seconds = 0;   // time in training steps only
  double images_per_sec = 0;  // training images / train_seconds
  double train_loss = 0;
  double train_accuracy = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  int64_t resumed_at_step = -1;             // the checkpoint's step when the run resumed; -1: fresh
  bool interrupted = false;                 // stopped by SIGTERM/SIGINT after the current step
  std::string last_checkpoint;              // path of the last checkpoint written (chief), if any
  std::string mixed_precision = "float32";  // the policy's Keras name
};

// `seconds` of the flag `flag` as whole milliseconds; InvalidArgument naming the flag unless it
// is finite and between 0.001 and 1e9.
std::chrono::milliseconds whole_milliseconds(const char* flag, double seconds);

// Examples per step across all replicas: --global-batch, or --batch-per-replica x `replicas`
// (under parameter_server one replica: a worker's step).
int64_t global_batch_of(const TrainOptions& options, int replicas);

// InvalidArgument naming the flag when a value is out of range (0 is "the default" only where
// TrainOptions says so; dist-train's command line refuses it).
void check_options(const TrainOptions& options);

// Runs body(); if it throws anything but a CollectiveError (which the other workers see
// anyway), the other workers are told first (Strategy::report_failure), so they stop at once
// naming this worker and the error instead of waiting for it until a timeout.
template <class Body>
auto failing_together(const Strategy& strategy, Body&& body) {
  try {
    return body();
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    strategy.report_failure(e.what());
    throw;
  }
}

// What both loops start from.
struct JobSetup {
  Strategy strategy;
  bool chief = true;  // the process holding replica 0: it alone prints and writes files
  int replicas = 0;
  int64_t global_batch = 0;
  int64_t num_train = 0;
  // parameter_server: the steps the chief schedules per epoch (--steps-per-epoch or derived);
  // 0 under the other strategies, whose epochs are passes over `train`.
  int64_t steps_per_epoch = 0;
  data::Dataset train;  // shuffled global batches of the training examples
  data::Dataset test;   // global batches of the test set
};
// Checks the options, makes the strategy, prints the job's header on the chief, checks that
// every output path can be written (chief), opens the data.
JobSetup start_job(const TrainOptions& options, std::ostream& chief_out);

// The settings that decide which steps a worker takes, by flag name, for
// Strategy::check_workers_agree. `resume_step`: the step the run resumes from, -1 if fresh.
std::vector<std::pair<std::string, std::string>> step_settings(const TrainOptions& options,
                                                               const JobSetup& job,
                                                               int64_t resume_step);

// The strategy the options choose (also sets the intra-op thread count where needed).
Strategy make_strategy(const TrainOptions& options);

// parameter_server: the steps the chief schedules per epoch: --steps-per-epoch, or one pass of
// the `num_train` examples across all workers (so an epoch means what it means under the other
// strategies). Also what the evaluator task counts to.
int64_t parameter_server_steps_per_epoch(const TrainOptions& options, int64_t num_train,
                                         int64_t global_batch);

// parameter_server: intra-op threads for this task: --threads, or the cores shared evenly by
// the job's tasks on this host (dist-launch puts them all on one).
void set_parameter_server_task_threads(const TrainOptions& options, const ClusterConfig& cluster);

// The Keras optimizer --optimizer and --lr choose (the fit loop's, and the evaluator's, whose
// model reads the fit loop's checkpoints optimizer and all).
keras::Optimizer make_keras_optimizer(const TrainOptions& options);

// Under ParameterServerStrategy worker i of N iterates its own copy of the training batches,
// started i/N of the way into the first pass and repeated without end: the copies are seeded
// alike, so copies that all started at the beginning would give every worker the same batches;
// repeated, a fast worker never runs dry. (Model::fit does the same with its data.)
data::Dataset per_worker_train_data(const data::Dataset& train, const InputContext& context);

// The job through the Keras API (--loop fit): keras::Model::fit with the test set as
// validation data, BackupAndRestore for --checkpoint-dir, TensorBoard and CSVLogger for
// --log-dir. Same results and flags as the custom loop.
TrainResult run_fit_training(const TrainOptions& options, std::ostream& chief_out);

// Runs the job; the chief writes human-readable progress to `chief_out`. Throws dist::Error on
// bad options or data, CollectiveError when a worker is lost.
TrainResult run_training(const TrainOptions& options, std::ostream& chief_out);

// The result as the one-line JSON object dist-train prints last.
std::string to_json_line(const TrainResult& result);

}  // namespace dist::tools
