#include "train_job.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/sharding.h"
#include "dist/distribute/strategy_extended.h"
#include "dist/train/mixed_precision.h"
#include "job_outputs.h"
#include "model_file.h"
#include "startup_signals.h"
#include "strategy_factory.h"
#include "training_data.h"

namespace dist::tools {

namespace {

// Creates `dir` if needed and proves that a file can be created in it, so that a result is
// never lost to an unwritable path after training.
void check_writable_directory(const char* flag, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  DIST_CHECK_ARG(!error, "cannot create the directory ", dir, " for ", flag, ": ", error.message(),
                 "; choose a writable path");
  const std::string probe = dir + "/.dist-train-probe-" + std::to_string(getpid());
  {
    std::ofstream file(probe);
    DIST_CHECK_ARG(file.good(), "cannot write in ", dir, " (", flag, "): ", std::strerror(errno),
                   "; choose a writable path");
  }
  std::filesystem::remove(probe, error);
}

// Creates every output's directory (for a file, its parent) and proves it writable. What may be
// at each path was checked before (check_job_outputs, run_training.cc); this is the part that
// changes the file system, done once the model file proved loadable.
void make_output_directories(const TrainOptions& options) {
  for (const JobOutput& output : job_outputs(options)) {
    if (output.flag == "--timeline") continue;  // every task makes its own (start_timeline)
    const std::filesystem::path path(output.path);
    const std::string dir = output.directory
                                ? output.path
                                : (path.has_parent_path() ? path.parent_path().string() : ".");
    check_writable_directory(output.flag.c_str(), dir);
  }
}

std::string exact(double value) {
  std::ostringstream out;
  out << std::setprecision(17) << value;
  return out.str();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> option_settings(const TrainOptions& options) {
  return {
      {"--loop", name_of(options.loop)},
      {"--model", options.model_file.empty() ? name_of(options.model) : "(--model-file)"},
      {"--model-file", options.model_file.empty() ? "none" : options.model_file},
      {"--optimizer", name_of(options.optimizer)},
      {"--lr", exact(options.lr)},
      {"--seed", std::to_string(options.seed)},
      {"--epochs", std::to_string(options.epochs)},
      {"--max-steps", std::to_string(options.max_steps)},
      {"--mixed-precision", mixed_precision::policy_name(options.mixed_precision)},
      {"--gradient-compression", options.gradient_compression},
      {"--compress-packs-from", std::to_string(options.min_compressed_pack_bytes)},
      {"--sharding", to_string(options.sharding)},
      {"--sharding-reuse-bytes",
       std::to_string(options.sharding_reuse_bytes.value_or(kDefaultShardingReuseBytes))},
      {"checkpoints (--checkpoint-dir)", options.checkpoint_dir.empty() ? "off" : "on"},
      {"--checkpoint-every", std::to_string(options.checkpoint_every)},
      {"--channels", std::to_string(options.images.channels)},
      {"--image-size",
       std::to_string(options.images.height) + "x" + std::to_string(options.images.width)},
      {"--resize-policy", options.images.resize_policy == ResizePolicy::kCrop ? "crop" : "resize"},
      {"--num-classes", std::to_string(options.images.num_classes)},
      {"--augment", augment_spelling(options.images)},
      {"--normalize", normalize_spelling(options.images)},
      {"--task", name_of(options.task.kind)},
      {"--features", features_spelling(options.task)},
      {"--label-feature", options.label_feature}};
}

std::vector<std::pair<std::string, std::string>> step_settings(const TrainOptions& options,
                                                               const JobSetup& job,
                                                               int64_t resume_step) {
  auto settings = option_settings(options);
  settings.insert(settings.end(),
                  {{"--steps-per-epoch", std::to_string(job.steps_per_epoch)},
                   {"the global batch", std::to_string(job.global_batch)},
                   {"the training examples", std::to_string(job.num_train)},
                   {"the test examples", std::to_string(job.test.cardinality())},
                   {"the step resumed from",
                    resume_step < 0 ? "none (a fresh start)" : std::to_string(resume_step)}});
  return settings;
}

namespace {

// How the workers of a multi-worker job exchange gradients, as the library chose it (the same
// host by address: docs/clusters.md), so that a run across hosts shows it took the network.
void print_worker_path(const Strategy& strategy, const TrainOptions& options, std::ostream& out) {
  if (strategy.num_workers() < 2 || strategy.step_schedule().one_runner_per_job) return;
  if (strategy.extended().workers_share_memory())
    out << "Between workers: shared memory (every worker on this host)" << std::endl;
  else
    out << "Between workers: the network, through the "
        << options.collective_backend.value_or(CommunicationOptions().backend)
        << " backend (not shared memory)" << std::endl;
}

// The images as the model gets them, on the chief: "Images: 3x64x64 (...)", and the classes.
void describe_images(const TrainOptions& options, const ImagePreparation& prepare,
                     const DataShape& shape, std::ostream& out) {
  const ImageOptions& flags = options.images;
  out << "Images: " << prepare.channels << "x" << prepare.height << "x" << prepare.width;
  if (flags.sized())
    out << (flags.resize_policy == ResizePolicy::kCrop
                ? " (the shorter side resized, the centre cropped)"
                : " (resized, antialiased)");
  if (flags.flip || flags.crop) out << "; --augment " << augment_spelling(flags) << " (training)";
  if (flags.normalized()) out << "; --normalize " << normalize_spelling(flags);
  out << "\nClasses: " << shape.classes << " (" << shape.classes_source << ")" << std::endl;
}

// With --features, on the chief: "Features: x (10 float) -> rows of 10", and what the model
// predicts.
void describe_features(const TrainOptions& options, const DataShape& shape, std::ostream& out) {
  out << "Features:";
  for (size_t i = 0; i < shape.features.size(); ++i)
    out << (i ? ", " : " ") << shape.features[i].name << " (" << shape.features[i].length << " "
        << data::feature_type_name(shape.features[i].type) << ")";
  out << " -> rows of " << shape.row_length() << std::endl;
  if (shape.targets > 0)
    out << "Task: regress the " << shape.targets << " value" << (shape.targets > 1 ? "s" : "")
        << " of --label-feature '" << options.label_feature
        << "' (mean squared error; mae reported)" << std::endl;
  else
    out << "Classes: " << shape.classes << " (" << shape.classes_source << ")" << std::endl;
}

// What a built-in model is built for; InvalidArgument, before anything is written, when it
// cannot take the data.
models::ImageModelInput built_in_model_input(const TrainOptions& options,
                                             const ImagePreparation& prepare,
                                             const DataShape& shape) {
  if (!shape.has_features()) {
    const models::ImageModelInput input{prepare.channels, prepare.height, prepare.width,
                                        shape.classes};
    models::check_image_model_input(input, name_of(options.model),
                                    options.model == ModelKind::kCnn ? 10 : 1);
    return input;
  }
  const bool mlp = options.model == ModelKind::kMlp || options.model == ModelKind::kMlpWide ||
                   options.model == ModelKind::kMlpDeep;
  DIST_CHECK_ARG(mlp, "--model ", name_of(options.model),
                 " takes images, not the rows of --features: use --model mlp (the default with "
                 "--features), mlp_wide or mlp_deep, or --model-file");
  DIST_CHECK_ARG(shape.first_row.is_floating_point(), "--features ",
                 features_spelling(options.task),
                 " are all int64, which the built-in models cannot take (token ids need an "
                 "embedding): give --model-file whose forward takes them, or float features");
  // The MLPs flatten what they take: a row of F is an "image" of 1 x 1 x F.
  return {1, 1, shape.row_length(), shape.outputs()};
}

// The header's first lines: the strategy, its devices and the global batch.
void print_strategy(const Strategy& strategy, const TrainOptions& options, int64_t global_batch,
                    std::ostream& out) {
  const int replicas = strategy.num_replicas_in_sync();
  out << "Strategy: " << strategy.name() << "\nNumber of devices: " << replicas
      << "\nGlobal batch size: " << global_batch << std::endl;
  print_worker_path(strategy, options, out);
  if (global_batch < replicas)
    out << "Warning: the global batch (" << global_batch << ") is smaller than the "
        << "number of replicas (" << replicas << "); some replicas get empty batches every step"
        << std::endl;
}

// What the chief says of the training data before training.
void describe_data(const TrainOptions& options, const TrainingData& data,
                   const ImagePreparation& prepare, const DataShape& shape, std::ostream& out) {
  if (!options.train_data.empty()) out << "Data: " << data.description << std::endl;
  if (!data.sharding.empty()) out << "Sharding: " << data.sharding << std::endl;
  if (shape.has_features())
    describe_features(options, shape, out);
  else
    describe_images(options, prepare, shape, out);
}

// The steps of an epoch when the strategy schedules steps (the parameter server's: the chief
// says how many); else 0, an epoch being one pass of the data.
int64_t scheduled_steps_per_epoch(const Strategy& strategy, const TrainOptions& options,
                                  int64_t num_train, int64_t global_batch, bool chief,
                                  std::ostream& out) {
  if (!strategy.step_schedule().epoch_is_step_count) return 0;
  const int64_t steps = parameter_server_steps_per_epoch(options, num_train, global_batch);
  if (chief)
    out << "Steps per epoch: " << steps << " (scheduled on the workers"
        << (options.steps_per_epoch > 0 ? ")" : "; one pass of the training data)") << std::endl;
  return steps;
}

// start_job once the strategy exists.
JobSetup prepare_job(const Strategy& strategy, const TrainOptions& options,
                     std::ostream& chief_out) {
  // Only the chief prints and writes files; the others would repeat it, and two workers must
  // never write the same file.
  const bool chief = strategy.is_chief();
  const int replicas = strategy.num_replicas_in_sync();
  const int64_t global_batch = global_batch_of(options, replicas);
  if (chief) print_strategy(strategy, options, global_batch, chief_out);
  const DataShape shape = inspect_training_data(options);
  std::shared_ptr<ModelFile> model_file;
  if (!options.model_file.empty())
    model_file = std::make_shared<ModelFile>(load_model_file(options, shape));
  const ImagePreparation prepare =
      shape.has_features()
          ? ImagePreparation{}
          : image_preparation(options, shape.first, model_file ? model_file->example_shape[0] : 0);
  TrainingData data = open_training_data(options, prepare, shape, global_batch,
                                         strategy.num_workers(), options.min_workers > 0);
  if (chief) describe_data(options, data, prepare, shape, chief_out);
  const int64_t num_train = data.num_train;
  DIST_CHECK_ARG(global_batch <= num_train, "the global batch (", global_batch,
                 ") is larger than the ", num_train,
                 " training examples, so every epoch would be one partial batch; choose "
                 "--global-batch (or --batch-per-replica x replicas) of at most ",
                 num_train);
  const int64_t steps_per_epoch =
      scheduled_steps_per_epoch(strategy, options, num_train, global_batch, chief, chief_out);
  if (model_file && chief) describe_model_file(*model_file, options, replicas, chief_out);
  // A built-in model that cannot take the data says so now, before anything is written.
  const models::ImageModelInput model_input =
      model_file ? models::ImageModelInput{} : built_in_model_input(options, prepare, shape);
  // Last: it creates the output directories, which a bad model file must leave unmade.
  if (chief) make_output_directories(options);
  JobSetup job{strategy,
               chief,
               replicas,
               global_batch,
               num_train,
               steps_per_epoch,
               std::move(data.train),
               std::move(data.test),
               data.ignored,
               nullptr,
               model_file,
               model_input};
  if (chief && !options.checkpoint_dir.empty())
    job.checkpoint_lock = std::make_shared<DirectoryLock>(options.checkpoint_dir, "checkpoints");
  return job;
}

}  // namespace

JobSetup start_job(const TrainOptions& options, std::ostream& chief_out, ElasticContext* elastic) {
  StopSignalsEndWaits signals;
  end_early_stop_watch(
      "loading (before the job started)");  // main's early watch ends here at the latest
  Strategy strategy = make_strategy(options, elastic);  // checks the options first
  JobSetup job =
      failing_together(strategy, [&] { return prepare_job(strategy, options, chief_out); });
  signals.done();
  return job;
}

int64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;  // kB
  return 0;
}

void report_peak_memory(const Strategy& strategy, TrainResult& result, std::ostream& chief_out) {
  std::vector<at::Tensor> peak{at::tensor({peak_resident_bytes()}, at::kLong)};
  // Under parameter servers the other tasks serve until the chief ends the job: no collective.
  const bool together = !strategy.step_schedule().one_runner_per_job;
  if (together) strategy.extended().all_reduce_across_workers(peak, ReduceOp::kMax);
  result.peak_rss_bytes = peak[0].item<int64_t>();
  chief_out << "Peak resident memory: " << result.peak_rss_bytes / (1 << 20) << " MiB ("
            << (together && strategy.num_workers() > 1 ? "the largest worker's, VmHWM)"
                                                       : "this process, VmHWM)")
            << std::endl;
}

void report_ignored_errors(const JobSetup& job, TrainResult& result, std::ostream& chief_out) {
  if (!job.ignored_errors) return;
  std::vector<at::Tensor> count{at::tensor({job.ignored_errors->count()}, at::kLong)};
  // Under kFile each worker read its own files: the damage adds up. Otherwise every worker read
  // (and skipped) the same records.
  const bool own_files = job.train.options().auto_shard_policy.value_or(AutoShardPolicy::kAuto) ==
                         AutoShardPolicy::kFile;
  if (!job.strategy.step_schedule().one_runner_per_job)
    job.strategy.extended().all_reduce_across_workers(count,
                                                      own_files ? ReduceOp::kSum : ReduceOp::kMax);
  result.ignored_errors = count[0].item<int64_t>();
  chief_out << "Skipped (--ignore-errors): " << result.ignored_errors
            << " records or images that could not be used";
  if (job.ignored_errors->count() > 0)
    chief_out << "; the first here: " << job.ignored_errors->first_message();
  chief_out << std::endl;
}

}  // namespace dist::tools
