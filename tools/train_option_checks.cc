// check_options: every value of dist-train's flags in range, and every combination of them one
// that dist-train can run, else InvalidArgument naming the flags and what to do instead.
#include <cmath>

#include "dist/collective/rendezvous_address.h"
#include "dist/core/error.h"
#include "dist/data/tfrecord.h"
#include "train_options.h"

namespace dist::tools {
namespace {

bool is_mirrored(StrategyKind s) {
  return s == StrategyKind::kMirrored || s == StrategyKind::kCentralStorage;
}

void check_ranges(const TrainOptions& o) {
  DIST_CHECK_ARG(o.epochs >= 1, "--epochs must be at least 1, got ", o.epochs);
  DIST_CHECK_ARG(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive finite number, got ",
                 o.lr);
  DIST_CHECK_ARG(o.max_steps == -1 || o.max_steps >= 1,
                 "--max-steps must be at least 1 (or -1 for no limit), got ", o.max_steps);
  DIST_CHECK_ARG(o.steps_per_epoch == -1 || o.steps_per_epoch >= 1,
                 "--steps-per-epoch must be at least 1 (or -1 for one pass of the data), got ",
                 o.steps_per_epoch);
  DIST_CHECK_ARG(o.batch_per_replica >= 1, "--batch-per-replica must be at least 1, got ",
                 o.batch_per_replica);
  DIST_CHECK_ARG(o.global_batch >= 0, "--global-batch must be at least 1, got ", o.global_batch);
  DIST_CHECK_ARG(o.train_examples == -1 || o.train_examples >= 1,
                 "--train-examples must be at least 1 (or -1 for all), got ", o.train_examples);
  DIST_CHECK_ARG(o.test_examples == -1 || o.test_examples >= 1,
                 "--test-examples must be at least 1 (or -1 for all), got ", o.test_examples);
  DIST_CHECK_ARG(o.replicas >= 0, "--replicas must be at least 1, got ", o.replicas);
  DIST_CHECK_ARG(o.threads >= 0, "--threads must be at least 1, got ", o.threads);
  DIST_CHECK_ARG(o.checkpoint_every >= 0, "--checkpoint-every must be at least 0, got ",
                 o.checkpoint_every);
  DIST_CHECK_ARG(o.min_workers >= 0, "--min-workers must be at least 1 (or 0: not elastic), got ",
                 o.min_workers);
  DIST_CHECK_ARG(o.commit_every >= 1, "--commit-every must be at least 1, got ", o.commit_every);
  DIST_CHECK_ARG(o.max_to_keep >= 1, "--max-to-keep must be at least 1, got ", o.max_to_keep);
  whole_milliseconds("--collective-timeout", o.collective_timeout);
  whole_milliseconds("--rendezvous-timeout", o.rendezvous_timeout);
  whole_milliseconds("--evaluator-timeout", o.evaluator_timeout);
  mixed_precision::check_supported(o.mixed_precision);
}

// --gradient-compression and --sharding: how gradients cross the replicas of a collective.
void check_gradient_flags(const TrainOptions& o, bool ps) {
  const bool one_replica =
      o.strategy == StrategyKind::kDefault || o.strategy == StrategyKind::kOneDevice;
  DIST_CHECK_ARG(o.gradient_compression == "none" || (!ps && !one_replica),
                 "--gradient-compression ", o.gradient_compression,
                 " applies to mirrored, central_storage and multi_worker, not to --strategy ",
                 name_of(o.strategy),
                 ps ? " (its gradients go to the ps tasks one variable at a time, not through a "
                      "collective a hook could compress)"
                    : " (one replica: no gradient crosses anything)");
  DIST_CHECK_ARG(o.sharding == Sharding::kNone || (!ps && !one_replica), "--sharding ",
                 to_string(o.sharding),
                 " applies to mirrored, central_storage and multi_worker, not to --strategy ",
                 name_of(o.strategy),
                 ps ? " (the ps tasks hold the variables and their slots, one share each "
                      "already)"
                    : " (one replica: nothing to split)");
  DIST_CHECK_ARG(o.sharding == Sharding::kNone || o.gradient_compression == "none", "--sharding ",
                 to_string(o.sharding), " and --gradient-compression ", o.gradient_compression,
                 " both decide how gradients cross the workers; use one of them");
  DIST_CHECK_ARG(!o.sharding_reuse_bytes || o.sharding == Sharding::kParameters,
                 "--sharding-reuse-bytes ", o.sharding_reuse_bytes.value_or(0),
                 " says which layers --sharding parameters keeps whole for their backward; with "
                 "--sharding ",
                 to_string(o.sharding),
                 " every parameter is whole already: drop it, or use --sharding parameters");
}

// --min-workers: what an elastic job needs to end where a fixed-size one would.
void check_elastic_flags(const TrainOptions& o) {
  if (o.min_workers == 0) return;
  const std::string elastic = "--min-workers " + std::to_string(o.min_workers);
  DIST_CHECK_ARG(o.strategy == StrategyKind::kMultiWorker, elastic,
                 " (an elastic job) applies to --strategy multi_worker only, not to --strategy ",
                 name_of(o.strategy));
  DIST_CHECK_ARG(o.global_batch > 0, elastic,
                 " needs --global-batch: the global batch must stay the same when the job "
                 "resizes (--batch-per-replica would change it with the number of replicas)");
  DIST_CHECK_ARG(o.sharding == Sharding::kNone, elastic, " and --sharding ", to_string(o.sharding),
                 ": a sharded state is split by the number of workers, which a resize changes; "
                 "use one of them");
  DIST_CHECK_ARG(!o.collective_backend || *o.collective_backend == "gloo", elastic,
                 " and --collective-backend ", o.collective_backend.value_or(""),
                 ": an MPI communicator's members are fixed at mpirun; an elastic job needs the "
                 "gloo backend, whose groups are made again at each resize");
  DIST_CHECK_ARG(o.gradient_compression == "none", elastic, " and --gradient-compression ",
                 o.gradient_compression,
                 ": compression keeps per-worker state that a resize would not carry over "
                 "exactly; use one of them");
}

// --model-file: what a scripted module cannot do (docs/dist-train.md, "Models from Python").
void check_model_file_flags(const TrainOptions& o) {
  DIST_CHECK_ARG(o.save_torchscript.empty() || !o.model_file.empty(), "--save-torchscript ",
                 o.save_torchscript,
                 " writes the module of --model-file back; the built-in --model ", name_of(o.model),
                 " is no TorchScript module: give --model-file, or use --save-weights");
  if (o.model_file.empty()) return;
  DIST_CHECK_ARG(o.min_workers == 0, "--model-file and --min-workers ", o.min_workers,
                 " (an elastic job): not supported together yet; train the module at a fixed "
                 "size (drop --min-workers)");
}

// --task and --features (task_options.h): features are a TFRecord's, and images' flags do not
// apply to them; a regression has no classes.
void check_task_flags(const TrainOptions& o) {
  const ImageOptions& images = o.images;
  if (o.task.uses_features()) {
    DIST_CHECK_ARG(!o.train_data.empty(), "--features ", features_spelling(o.task),
                   " names features of your TFRecord files: give --train-data tfrecord:GLOB and "
                   "--test-data (Fashion-MNIST has images only)");
    DIST_CHECK_ARG(images.channels == 0 && !images.sized() && !images.flip && !images.crop &&
                       !images.normalized(),
                   "the image flags (--channels, --image-size, --augment, --normalize) apply to "
                   "images, not to --features ",
                   features_spelling(o.task), "; drop them");
  }
  if (o.task.kind != TaskKind::kRegress) return;
  DIST_CHECK_ARG(o.task.uses_features(),
                 "--task regress predicts values from --features (TFRecord features of "
                 "numbers); an image folder's and Fashion-MNIST's labels are classes: give "
                 "--features, or --task classify");
  DIST_CHECK_ARG(images.num_classes == 0, "--num-classes ", images.num_classes,
                 " applies to --task classify; --task regress predicts the values of "
                 "--label-feature (as many outputs as it has values)");
}

// What --strategy parameter_server does not support yet, or runs otherwise.
void check_parameter_server_flags(const TrainOptions& o) {
  DIST_CHECK_ARG(o.train_data.empty(),
                 "--train-data is not supported under --strategy parameter_server yet (its "
                 "workers and evaluator read Fashion-MNIST); use another strategy");
  DIST_CHECK_ARG(o.images.channels == 0 && !o.images.sized() && !o.images.flip && !o.images.crop &&
                     !o.images.normalized() && o.images.num_classes == 0,
                 "the image flags (--channels, --image-size, --num-classes, --augment, "
                 "--normalize) are not supported under --strategy parameter_server yet (its "
                 "workers and evaluator read Fashion-MNIST as stored); use another strategy");
  // Said here, on every task before its strategy is made: BackupAndRestore would refuse it on
  // the chief alone, in its own words (save_freq).
  DIST_CHECK_ARG(o.checkpoint_every == 0 || o.loop != Loop::kFit, "--checkpoint-every ",
                 o.checkpoint_every,
                 " is not supported with --loop fit under --strategy parameter_server: steps run "
                 "ahead of the chief, so a save within an epoch would not hold the step it "
                 "records; fit saves at epoch ends and stops (drop --checkpoint-every), or use "
                 "--loop custom, whose checkpoints wait for the scheduled steps");
  DIST_CHECK_ARG(!o.cross_device_ops,
                 "--cross-device-ops applies to mirrored and central_storage only, not to "
                 "--strategy parameter_server (the ps tasks apply the updates)");
  DIST_CHECK_ARG(o.replicas <= 1,
                 "--strategy parameter_server runs one replica per worker, but --replicas ",
                 o.replicas, " was given; add workers instead (dist-launch --workers N)");
}

void check_combinations(const TrainOptions& o) {
  const bool ps = o.strategy == StrategyKind::kParameterServer;
  if (ps) check_parameter_server_flags(o);
  DIST_CHECK_ARG(!o.train_data.empty() || (o.test_data.empty() && !o.ignore_errors),
                 o.ignore_errors ? "--ignore-errors" : "--test-data",
                 " applies to your files (--train-data) only");
  data::compression_from_name(o.tfrecord_compression);  // names the flag's accepted values
  DIST_CHECK_ARG(o.sync_batch_norm || o.model == ModelKind::kResnet || !o.model_file.empty(),
                 "--no-sync-batch-norm applies to --model resnet only (the other models have no "
                 "batch normalization)");
  check_model_file_flags(o);
  check_task_flags(o);
  DIST_CHECK_ARG(o.images.num_classes == 0 || o.images.num_classes >= 10 || !o.train_data.empty(),
                 "--num-classes ", o.images.num_classes,
                 " is fewer than Fashion-MNIST's 10 classes (its labels go up to 9); give "
                 "--num-classes for your own files (--train-data)");
  DIST_CHECK_ARG(o.steps_per_epoch == -1 || ps,
                 "--steps-per-epoch applies to --strategy parameter_server only (the other "
                 "strategies take whole passes of the data; use --max-steps to stop early)");
  DIST_CHECK_ARG(o.resume_from.empty() || o.loop == Loop::kCustom,
                 "--resume-from applies to --loop custom; --loop fit resumes from the latest "
                 "backup in --checkpoint-dir");
  DIST_CHECK_ARG(!o.collective_backend || o.strategy == StrategyKind::kMultiWorker,
                 "--collective-backend applies to --strategy multi_worker only, not to "
                 "--strategy ",
                 name_of(o.strategy), " (its replicas share one process or talk to ps tasks)");
  DIST_CHECK_ARG(o.rendezvous.empty() || o.strategy == StrategyKind::kMultiWorker,
                 "--rendezvous applies to --strategy multi_worker only, not to --strategy ",
                 name_of(o.strategy));
  parse_rendezvous_address(o.rendezvous, "--rendezvous");  // says what is wrong with it
  check_gradient_flags(o, ps);
  check_elastic_flags(o);
  const bool one_replica =
      o.strategy == StrategyKind::kDefault || o.strategy == StrategyKind::kOneDevice;
  if (ps) return;
  DIST_CHECK_ARG(!o.cross_device_ops || is_mirrored(o.strategy),
                 "--cross-device-ops applies to mirrored and central_storage only, not to "
                 "--strategy ",
                 name_of(o.strategy));
  DIST_CHECK_ARG(!one_replica || o.replicas <= 1, "--strategy ", name_of(o.strategy),
                 " runs exactly one replica, but --replicas ", o.replicas,
                 " was given; drop --replicas or use --strategy mirrored");
}

}  // namespace

void check_options(const TrainOptions& options) {
  check_ranges(options);
  check_combinations(options);
}

}  // namespace dist::tools
