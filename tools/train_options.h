// dist-train's options as typed values, parsed from the command line and checked in one place:
// parse_command_line (the flags, their spellings and ranges) and check_options (every value and
// combination). Both loops, the evaluator and the launchers' tests take a TrainOptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "dist/collective/cross_device_ops.h"
#include "dist/core/env.h"
#include "dist/data/auto_shard_policy.h"
#include "dist/distribute/communication_hook.h"
#include "dist/distribute/sharding.h"
#include "dist/train/mixed_precision.h"
#include "image_options.h"
#include "task_options.h"

namespace dist::tools {

enum class Loop { kCustom, kFit };  // the tf.distribute custom loop | Keras-style Model::fit
enum class StrategyKind {
  kDefault,
  kOneDevice,
  kMirrored,
  kCentralStorage,
  kMultiWorker,      // cluster from TF_CONFIG, Slurm or MPI
  kParameterServer,  // roles from TF_CONFIG
};
enum class OptimizerKind { kAdam, kSgd };
// the tutorial CNN | the 784-4096-4096-10 MLP (20M parameters) | the 784-10240-10240-10 MLP
// (113M parameters: the model of the sharding memory bench)
enum class ModelKind { kCnn, kMlp, kMlpWide, kMlpDeep, kResnet };

// The command-line spelling ("custom", "parameter_server", "adam", "cnn").
std::string name_of(Loop loop);
std::string name_of(StrategyKind strategy);
std::string name_of(OptimizerKind optimizer);
std::string name_of(ModelKind model);
std::string name_of(AutoShardPolicy policy);
// From the command-line spelling; InvalidArgument "unknown --strategy 'x': use ..." otherwise.
Loop parse_loop(const std::string& text);
StrategyKind parse_strategy(const std::string& text);
OptimizerKind parse_optimizer(const std::string& text);
ModelKind parse_model(const std::string& text);
AutoShardPolicy parse_auto_shard(const std::string& text);

struct TrainOptions {
  Loop loop = Loop::kCustom;
  StrategyKind strategy = StrategyKind::kMirrored;
  int replicas = 0;  // 0: the strategy's default (mirrored: one per core; multi_worker: 1)
  int threads = 0;   // intra-op threads per replica; 0: cores / replicas
  // mirrored and central_storage only; none: the strategy's default.
  std::optional<CrossDeviceOps> cross_device_ops;
  double collective_timeout = 300;  // multi_worker: seconds before a lost worker is reported
  double rendezvous_timeout = 120;  // multi_worker: seconds for all workers to join
  bool check_collectives = true;    // multi_worker: CommunicationOptions::check_collectives
  // multi_worker: CommunicationOptions::backend; none: the library's default.
  std::optional<std::string> collective_backend;
  // multi_worker: CommunicationOptions::rendezvous ("etcd://h:p,.../prefix"); empty: the
  // built-in store, unless DIST_RENDEZVOUS names one.
  std::string rendezvous;
  // mirrored, central_storage, multi_worker: how gradients cross the processes, as
  // dist::gradient_compression takes it ("none", "bf16", "fp16", "powersgd:RANK[:START]").
  std::string gradient_compression = "none";
  // The hook it names, made once the flags are read (null for "none"): the strategy uses it
  // and checkpoints hold its state.
  std::shared_ptr<CommunicationHook> communication_hook;
  // Packs below this many bytes cross uncompressed (CommunicationOptions).
  int64_t min_compressed_pack_bytes = -1;
  // mirrored, central_storage, multi_worker: MirroredOptions / MultiWorkerOptions::sharding.
  Sharding sharding = Sharding::kNone;
  // With Sharding::kParameters: MirroredOptions::sharding_reuse_bytes.
  std::optional<int64_t> sharding_reuse_bytes;  // unset: kDefaultShardingReuseBytes
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
  OptimizerKind optimizer = OptimizerKind::kAdam;
  ModelKind model = ModelKind::kCnn;
  // A TorchScript classifier from Python instead of --model (tools/model_file.h): its forward
  // takes the float image batch N x C x H x W and returns N x classes logits; empty: --model.
  std::string model_file;
  // --model-file: the trained module written back as a TorchScript file (chief); empty: none.
  std::string save_torchscript;
  // Batch normalization (resnet) over the global batch under every multi-replica strategy;
  // false: over each replica's slice (--no-sync-batch-norm, to compare).
  bool sync_batch_norm = true;
  mixed_precision::Policy mixed_precision = mixed_precision::Policy::kFloat32;
  uint64_t seed = 42;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t train_examples = -1;  // use only the first N training examples; -1: all
  int64_t test_examples = -1;   // evaluate on the first N test examples only; -1: all
  // A user's files instead of Fashion-MNIST (tools/training_data.h): "tfrecord:GLOB" (records
  // of tf.train.Example) or "images:DIR" (a folder of class folders); empty: data_dir's IDX.
  std::string train_data;
  std::string test_data;
  std::string image_feature = "image/encoded";      // the encoded PNG or JPEG of a record
  std::string label_feature = "image/class/label";  // its int64 class (regress: its values)
  std::string tfrecord_compression = "NONE";        // NONE, GZIP or ZLIB (TFRecordDataset's)
  AutoShardPolicy auto_shard = AutoShardPolicy::kAuto;
  // Channels, size, classes, augmentation and normalization of the images (image_options.h).
  ImageOptions images;
  // --task and --features: what the model learns, from the image or from features
  // (task_options.h).
  TaskOptions task;
  int decode_threads = 0;          // threads decoding images; 0: the machine's hardware threads
  int64_t shuffle_buffer = 10000;  // files: encoded examples shuffled within a buffer this big
  bool ignore_errors = false;      // skip (and count) records and images that cannot be used
  std::string checkpoint_dir;      // resumable checkpoints; resumes from the latest one here
  std::string resume_from;         // a checkpoint file to resume from instead of the latest
  int64_t checkpoint_every = 0;    // also save every K global steps (0: epoch ends and stops)
  int max_to_keep = 3;             // checkpoints kept in checkpoint_dir
  std::string log_dir;             // per-epoch metrics as JSON lines
  std::string save_weights;        // final weights as safetensors
  bool progress = true;            // progress bar / lines within each epoch
  // multi_worker: > 0 makes the job elastic (docs/elastic.md): when workers are lost, the others
  // go on at the new size while at least this many remain; 0: a lost worker ends the job.
  int min_workers = 0;
  // The Chrome trace of every step (dist/core/timeline.h; tools/timeline_file.h names each
  // task's file); empty: none.
  std::string timeline;
  // Elastic: the training state is kept in memory every K steps (and at epoch ends); a resize
  // goes back to the last one kept.
  int64_t commit_every = 1;
  // Called after each completed step with the global step count (tests: a worker that kills
  // itself at a given step); empty: nothing.
  std::function<void(int64_t)> after_step;
  // Called once every check has passed and a checkpoint was resumed, just before the first
  // step (the custom loop and fit; tests: dist-train's checks run in-process end here by
  // throwing); empty: nothing.
  std::function<void()> before_first_step;
  // The custom loop's checkpoints and --save-weights go through it (not owned); the crash tests
  // pass one that kills the process mid-save. The fit loop's Keras callbacks use the default.
  Env* env = Env::Default();
};

// InvalidArgument naming the flag when a value or a combination of values is not allowed (0
// means "the default" only where TrainOptions says so). The one place options are checked;
// what depends on the cluster (an evaluator task needs --checkpoint-dir) is checked where the
// cluster is read.
void check_options(const TrainOptions& options);

// What the launcher says through the environment, where the command line left the default:
// DIST_REPLICAS_PER_WORKER (dist-launch --replicas-per-worker) for multi_worker's --replicas,
// DIST_MIN_WORKERS (dist-launch --workers MIN:MAX) for its --min-workers.
// InvalidArgument naming the variable when its value is not a count.
void apply_launcher_environment(TrainOptions& options);

// `seconds` of the flag `flag` as whole milliseconds; InvalidArgument naming the flag unless it
// is finite and between 0.001 and 1e9.
std::chrono::milliseconds whole_milliseconds(const char* flag, double seconds);

// Examples per step across all replicas: --global-batch, or --batch-per-replica x `replicas`
// (under parameter_server one replica: a worker's step).
int64_t global_batch_of(const TrainOptions& options, int replicas);

// dist-train's command line: the options (checked), or the exit code when parsing ended it
// (0 after --help, printed to `out`; 2 for a bad flag or value, with the message on `err`).
struct CommandLine {
  TrainOptions options;
  std::optional<int> exit_code;
};
CommandLine parse_command_line(int argc, char** argv, std::ostream& out, std::ostream& err);
// On stdout and stderr, as dist-train's main.
CommandLine parse_command_line(int argc, char** argv);

}  // namespace dist::tools
