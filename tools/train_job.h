// The main job of dist-train: the tutorial's custom training loop on Fashion-MNIST, written
// once against dist::Strategy and run under whichever strategy the flags choose.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "dist/core/env.h"
#include "dist/core/error.h"
#include "dist/data/dataset.h"
#include "dist/data/ignored_errors.h"
#include "dist/distribute/cluster_spec.h"
#include "dist/distribute/input_context.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/strategy.h"
#include "dist/models/model_input.h"
#include "dist/train/directory_lock.h"
#include "dist/train/elastic.h"
#include "dist/train/preemption.h"
#include "train_options.h"
#include "train_result.h"

namespace dist::keras {
struct Optimizer;
}

namespace dist::tools {

struct ModelFile;  // model_file.h

// This process's peak resident memory so far (VmHWM of /proc/self/status), in bytes; 0 where
// the file or the line is missing.
int64_t peak_resident_bytes();
// Every worker calls it at the end of a job whose workers run the loop together (a
// collective): the largest worker's peak resident memory goes into `result` and is said on
// `chief_out`.
void report_peak_memory(const Strategy& strategy, TrainResult& result, std::ostream& chief_out);

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
  // The records and images --ignore-errors skipped (null without it).
  std::shared_ptr<data::IgnoredErrors> ignored_errors;
  // The chief's hold on --checkpoint-dir for the whole job: a second job on the same directory
  // is refused, naming this one's host and pid.
  std::shared_ptr<DirectoryLock> checkpoint_lock;
  // --model-file, loaded and checked on a batch of `train` (null without it).
  std::shared_ptr<const ModelFile> model_file;
  // What a built-in model is built for: the images as prepared and the data's classes.
  models::ImageModelInput model_input;
};
// Every worker, likewise: under --ignore-errors, the records and images skipped by all workers
// go into `result` and are said, with the first one's error, on `chief_out`.
void report_ignored_errors(const JobSetup& job, TrainResult& result, std::ostream& chief_out);
// Checks the options, makes the strategy, prints the job's header on the chief, opens the data,
// loads --model-file and checks its forward on a batch, then checks that every output path can
// be written (chief): a bad model file leaves nothing written. `elastic`: an elastic job's
// generation, whose strategy the job takes (multi_worker only); unset: every worker of the
// cluster.
JobSetup start_job(const TrainOptions& options, std::ostream& chief_out,
                   ElasticContext* elastic = nullptr);

// What of `options` alone decides which steps a worker takes, by flag name: part of
// step_settings, and what a worker joining an elastic job (which has no JobSetup yet) must share.
std::vector<std::pair<std::string, std::string>> option_settings(const TrainOptions& options);

// The settings that decide which steps a worker takes, by flag name, for
// Strategy::check_workers_agree: option_settings and what the job derived from them.
// `resume_step`: the step the run resumes from, -1 if fresh.
std::vector<std::pair<std::string, std::string>> step_settings(const TrainOptions& options,
                                                               const JobSetup& job,
                                                               int64_t resume_step);

// The Keras optimizer --optimizer and --lr choose (the fit loop's, and the evaluator's, whose
// model reads the fit loop's checkpoints optimizer and all).
keras::Optimizer make_keras_optimizer(const TrainOptions& options);

// The job through the Keras API (--loop fit): keras::Model::fit with the test set as
// validation data, BackupAndRestore for --checkpoint-dir, TensorBoard and CSVLogger for
// --log-dir. Same results and flags as the custom loop.
TrainResult run_fit_training(const TrainOptions& options, std::ostream& chief_out);

// fit on a started job, as one generation of an elastic job (--loop fit --min-workers).
TrainResult run_fit_generation(const TrainOptions& options, JobSetup& job, std::ostream& chief_out,
                               std::chrono::steady_clock::time_point job_start,
                               ElasticContext& elastic);
// The custom loop on a started job; `elastic`: one generation of an elastic job (null
// otherwise), in which it commits and restores its state.
TrainResult run_custom_loop(const TrainOptions& options, JobSetup& job,
                            const PreemptionWatcher& preemption, std::ostream& chief_out,
                            std::chrono::steady_clock::time_point job_start,
                            ElasticContext* elastic);

}  // namespace dist::tools
