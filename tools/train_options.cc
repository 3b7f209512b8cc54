#include "train_options.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "dist/collective/collective_backends.h"
#include "dist/core/error.h"
#include "dist/data/tfrecord.h"
#include "dist/distribute/gradient_compression.h"

namespace dist::tools {
namespace {

// Each enum's spellings, in the order the messages list them.
template <class E>
using Spellings = std::vector<std::pair<E, const char*>>;

const Spellings<Loop> kLoops = {{Loop::kCustom, "custom"}, {Loop::kFit, "fit"}};
const Spellings<StrategyKind> kStrategies = {{StrategyKind::kDefault, "default"},
                                             {StrategyKind::kOneDevice, "one_device"},
                                             {StrategyKind::kMirrored, "mirrored"},
                                             {StrategyKind::kCentralStorage, "central_storage"},
                                             {StrategyKind::kMultiWorker, "multi_worker"},
                                             {StrategyKind::kParameterServer, "parameter_server"}};
const Spellings<OptimizerKind> kOptimizers = {{OptimizerKind::kAdam, "adam"},
                                              {OptimizerKind::kSgd, "sgd"}};
const Spellings<ModelKind> kModels = {{ModelKind::kCnn, "cnn"},
                                      {ModelKind::kMlp, "mlp"},
                                      {ModelKind::kMlpWide, "mlp_wide"},
                                      {ModelKind::kMlpDeep, "mlp_deep"},
                                      {ModelKind::kResnet, "resnet"}};
const Spellings<AutoShardPolicy> kAutoShardPolicies = {{AutoShardPolicy::kAuto, "auto"},
                                                       {AutoShardPolicy::kFile, "file"},
                                                       {AutoShardPolicy::kData, "data"},
                                                       {AutoShardPolicy::kOff, "off"}};

template <class E>
std::string spelling(const Spellings<E>& all, E value) {
  for (const auto& [e, text] : all)
    if (e == value) return text;
  DIST_INTERNAL_ASSERT(false, "an enum value without a spelling");
  return {};
}

// "a, b or c"
template <class E>
std::string listed(const Spellings<E>& all) {
  std::string out;
  for (size_t i = 0; i < all.size(); ++i)
    out += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string(all[i].second);
  return out;
}

template <class E>
E parse(const Spellings<E>& all, const char* flag, const std::string& text) {
  for (const auto& [e, spelled] : all)
    if (text == spelled) return e;
  throw InvalidArgument(detail::concat("unknown ", flag, " '", text, "': use ", listed(all)));
}

// "gloo, mpi": the backends this build has, for --help.
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// -1 ("no limit", "all") or at least 1: 0 is neither, and used to mean "the default" silently.
std::string minus_one_or_positive(std::string& text) {
  try {
    const long long value = std::stoll(text);
    if (value == -1 || value >= 1) return {};
  } catch (const std::exception&) {
  }
  return "must be -1 or at least 1, got " + text;
}
const CLI::Validator kMinusOneOrPositive(minus_one_or_positive, "-1 or >= 1");

// A count of at least 1. CLI::PositiveNumber's message for 0 ("Value 0 not in range 0.000000
// to 1.79769e+308", 300 digits long) named a range that holds 0.
std::string at_least_one(std::string& text) {
  try {
    size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (value >= 1 && used == text.size()) return {};
  } catch (const std::exception&) {
  }
  return "must be at least 1, got " + text;
}
const CLI::Validator kAtLeastOne(at_least_one, ">= 1");

// The text of the enum-like flags, turned into their types after parsing.
struct Spelled {
  std::string loop = "custom", strategy = "mirrored", optimizer = "adam", model;
  std::string mixed_precision = "float32", cross_device_ops, sharding = "none";
  std::string auto_shard = "auto", tfrecord_compression = "none";
  bool no_progress = false, unchecked = false, no_sync_batch_norm = false, sync_batch_norm = false;
  ImageFlagTexts images;
  TaskFlagTexts task;
};

void add_job_flags(CLI::App& app, TrainOptions& o, Spelled& s) {
  app.add_option("--loop", s.loop,
                 "custom (the tf.distribute custom training loop) | fit (Keras-style "
                 "Model::fit with callbacks)")
      ->capture_default_str();
  app.add_option("--strategy", s.strategy,
                 "default | one_device | mirrored | central_storage | multi_worker (TF_CONFIG, "
                 "srun or mpirun) | parameter_server (TF_CONFIG with chief, worker and ps "
                 "tasks, e.g. from dist-launch --ps: every task runs this same command; "
                 "asynchronous, one replica per worker)")
      ->capture_default_str();
  app.add_option("--replicas", o.replicas,
                 "replicas (mirrored/central_storage; default: one per core; multi_worker: per "
                 "worker, default DIST_REPLICAS_PER_WORKER or 1)")
      ->check(kAtLeastOne);
  app.add_option("--threads", o.threads, "intra-op threads per replica (default: cores / replicas)")
      ->check(kAtLeastOne);
  app.add_option("--collective-timeout", o.collective_timeout,
                 "multi_worker: seconds before a lost or stalled worker is reported; "
                 "parameter_server: the deadline of every call to another task, and how long "
                 "ps and worker tasks wait to hear from the chief before giving up")
      ->capture_default_str();
  app.add_option("--rendezvous-timeout", o.rendezvous_timeout,
                 "multi_worker: seconds for all workers to join; parameter_server: for the ps "
                 "tasks to serve")
      ->capture_default_str();
  app.add_option("--evaluator-timeout", o.evaluator_timeout,
                 "parameter_server, on the evaluator task: seconds without a new checkpoint in "
                 "--checkpoint-dir before it gives up (exit 3)")
      ->capture_default_str();
  app.add_option("--cross-device-ops", s.cross_device_ops,
                 "parallel | reduction_to_one_device | hierarchical_copy");
  app.add_option("--collective-backend", o.collective_backend,
                 "multi_worker: the collective backend between the workers: gloo | mpi (under "
                 "mpirun; this build: " +
                     joined(collective_backends()) + ")");
  app.add_option("--rendezvous", o.rendezvous,
                 "multi_worker: where the workers meet: etcd://host:port,host:port/prefix (an etcd "
                 "cluster that holds the job's state, so that an elastic job survives the loss of "
                 "any worker); default: DIST_RENDEZVOUS, else the built-in store at the chief's "
                 "address");
  app.add_flag("--unchecked-collectives", s.unchecked,
               "multi_worker: skip the agreement before each collective (for measuring its "
               "cost; workers that diverge then abort inside Gloo)");
}

// How gradients cross the replicas: compression and sharding.
void add_gradient_flags(CLI::App& app, TrainOptions& o, Spelled& s) {
  app.add_option("--gradient-compression", o.gradient_compression,
                 "mirrored, central_storage, multi_worker: how gradients cross the workers: "
                 "none | bf16 | fp16 (16 bits each, half the bytes) | powersgd:RANK[:START] "
                 "(rank-RANK approximations after START plain steps, default 10)")
      ->capture_default_str();
  app.add_option("--compress-packs-from", o.min_compressed_pack_bytes,
                 "with --gradient-compression: packs of fewer bytes cross uncompressed, too "
                 "small to gain (-1: the compression's own threshold, powersgd 1048576, bf16 "
                 "and fp16 0; 0: every pack compressed)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  app.add_option("--sharding", s.sharding,
                 "mirrored, central_storage, multi_worker: what the workers split between them "
                 "instead of each keeping it whole (ZeRO): none | optimizer (the optimizer's "
                 "slots) | gradients (and the gradients between steps) | parameters (and the "
                 "parameters, gathered layer by layer: one replica per worker)")
      ->capture_default_str();
  app.add_option("--sharding-reuse-bytes", o.sharding_reuse_bytes,
                 "with --sharding parameters: a layer stays whole from its forward to its "
                 "backward (one gather saved) when the layers after it hold at most this many "
                 "bytes of parameters (default 268435456, 256 MiB: a model of up to 256 MiB is "
                 "gathered once a step; 0: only the last layer, the least memory for 1.5x the "
                 "bytes of an all-reduce; -1: every layer, the whole model held at the turn)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()))
      ->default_str(std::to_string(kDefaultShardingReuseBytes));  // shown; unset stays unset
}

void add_training_flags(CLI::App& app, TrainOptions& o, Spelled& s) {
  add_gradient_flags(app, o, s);
  app.add_option("--epochs", o.epochs, "epochs to train")
      ->capture_default_str()
      ->check(kAtLeastOne);
  app.add_option("--max-steps", o.max_steps, "stop after this many global steps (-1: no limit)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--steps-per-epoch", o.steps_per_epoch,
                 "parameter_server only: steps the chief schedules per epoch, shared by all "
                 "workers (-1: one pass of the training data in all, ceil(examples / global "
                 "batch), so an epoch means what it means under the other strategies; each "
                 "worker iterates its own copy of the data, started i/N of the way into the "
                 "pass and repeated, so it never runs dry)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--batch-per-replica", o.batch_per_replica,
                 "examples per replica per step (parameter_server: per worker step)")
      ->capture_default_str()
      ->check(kAtLeastOne);
  app.add_option("--global-batch", o.global_batch,
                 "examples per step across all replicas (overrides --batch-per-replica)")
      ->check(kAtLeastOne);
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", s.optimizer, "adam | sgd")->capture_default_str();
  app.add_option("--model", s.model,
                 "cnn (tutorial CNN) | mlp (784-4096-4096-10) | mlp_wide (784-10240-10240-10) | "
                 "mlp_deep (784, 7 x 4096, 10) | resnet (the Mirrored Strategy tutorial's, "
                 "with batch normalization, 32x32); default cnn");
  app.add_option("--model-file", o.model_file,
                 "train a TorchScript classifier from Python instead of --model: a file of "
                 "torch.jit.save (torch.jit.script or torch.jit.trace) whose forward takes the "
                 "float image batch N x C x H x W (values in [0, 1], or as --normalize makes "
                 "them) and returns N x classes logits; checked by one forward before training");
  app.add_option("--save-torchscript", o.save_torchscript,
                 "--model-file: write the trained module as a TorchScript file that Python's "
                 "torch.jit.load reads");
  app.add_flag("--sync-batch-norm", s.sync_batch_norm,
               "resnet: normalize over the global batch, as one device does (the default)");
  app.add_flag("--no-sync-batch-norm", s.no_sync_batch_norm,
               "resnet: each replica normalizes by its own slice's statistics (the default "
               "normalizes over the global batch, as one device does); --model-file: what "
               "its batch norms do anyway");
  app.add_option("--seed", o.seed, "seed of weights and shuffling")->capture_default_str();
  app.add_option("--mixed-precision", s.mixed_precision,
                 "float32 | bf16 (compute in bfloat16, variables float32; Keras' "
                 "mixed_bfloat16) | fp16 (GPU only)")
      ->capture_default_str();
}

// A user's files instead of Fashion-MNIST (tools/training_data.h).
void add_file_data_flags(CLI::App& app, TrainOptions& o, Spelled& s) {
  app.add_option("--train-data", o.train_data,
                 "train on your files instead of Fashion-MNIST: tfrecord:GLOB (tf.train.Example "
                 "records with an encoded PNG/JPEG and an int64 label) or images:DIR (one "
                 "sub-folder of images per class); needs --test-data");
  app.add_option("--test-data", o.test_data, "evaluate on these files (same spec forms)");
  app.add_option("--image-feature", o.image_feature, "tfrecord: the encoded image's feature")
      ->capture_default_str();
  app.add_option("--label-feature", o.label_feature,
                 "tfrecord: the label's feature (int64 class; --task regress: float values)")
      ->capture_default_str();
  app.add_option("--tfrecord-compression", s.tfrecord_compression,
                 "tfrecord: none | gzip | zlib (TFRecordDataset's compression_type)")
      ->capture_default_str();
  app.add_option("--auto-shard", s.auto_shard,
                 "multi_worker: auto (file for your files, data for Fashion-MNIST) | file (worker "
                 "i reads files i, i+N, ...) | data (every worker reads all, keeps its rows: one "
                 "device's batches) | off")
      ->capture_default_str();
  app.add_option("--decode-threads", o.decode_threads,
                 "threads decoding images (0: one per hardware thread)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shuffle-buffer", o.shuffle_buffer,
                 "your files: encoded examples shuffled within a buffer of this many")
      ->capture_default_str()
      ->check(kAtLeastOne);
  app.add_flag("--ignore-errors", o.ignore_errors,
               "your files: skip records and images that cannot be read or decoded, and count "
               "them (default: stop at the first, naming it)");
}

void add_data_and_output_flags(CLI::App& app, TrainOptions& o, Spelled& s) {
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--train-examples", o.train_examples,
                 "train on the first N examples only (-1: all)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--test-examples", o.test_examples,
                 "evaluate on the first N test examples only (-1: all)")
      ->capture_default_str()
      ->check(kMinusOneOrPositive);
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "save resumable checkpoints here (each epoch end, every --checkpoint-every "
                 "steps, at --max-steps and on SIGTERM/SIGINT); resume from the latest one");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "also save every K global steps (0: only at epoch ends and stops)")
      ->capture_default_str();
  app.add_option("--resume-from", o.resume_from,
                 "resume from this checkpoint file instead of the latest in --checkpoint-dir "
                 "(--loop custom)");
  app.add_option("--max-to-keep", o.max_to_keep, "checkpoints to keep")
      ->capture_default_str()
      ->check(kAtLeastOne);
  app.add_option("--log-dir", o.log_dir,
                 "per-epoch metrics as TensorBoard event files in LOG_DIR/train and "
                 "LOG_DIR/validation, a histogram of each weight per epoch in LOG_DIR/train, "
                 "and the metrics appended to LOG_DIR/metrics.jsonl (--loop fit: "
                 "LOG_DIR/metrics.csv)");
  app.add_option("--save-weights", o.save_weights, "write the final weights as safetensors");
  app.add_option("--timeline", o.timeline,
                 "write a trace of every step (data, forward, backward, each collective with "
                 "its bytes, the optimizer) in the Chrome trace event format, which "
                 "ui.perfetto.dev opens; a task of a cluster writes FILE with its task before "
                 "the extension (trace.worker-1.json); scripts/merge_timelines.py joins them");
  app.add_flag("--no-progress", s.no_progress, "only print per-epoch lines");
  app.add_option("--min-workers", o.min_workers,
                 "multi_worker: an elastic job: when workers are lost, the others go on at the "
                 "new size from the last state kept in memory while at least this many remain "
                 "(needs --global-batch; docs/elastic.md)")
      ->check(kAtLeastOne);
  app.add_option("--commit-every", o.commit_every,
                 "elastic: keep the training state in memory every K steps (a resize goes back "
                 "to the last one kept)")
      ->capture_default_str()
      ->check(kAtLeastOne);
}

// The spelled values as types, then the launcher's environment, then every check.
void finish(TrainOptions& o, const Spelled& s) {
  o.loop = parse_loop(s.loop);
  o.strategy = parse_strategy(s.strategy);
  o.optimizer = parse_optimizer(s.optimizer);
  DIST_CHECK_ARG(s.model.empty() || o.model_file.empty(), "--model ", s.model, " and --model-file ",
                 o.model_file, " both name the model to train; give one of them");
  DIST_CHECK_ARG(!s.sync_batch_norm || !s.no_sync_batch_norm,
                 "--sync-batch-norm and --no-sync-batch-norm contradict each other; give one");
  DIST_CHECK_ARG(!s.sync_batch_norm || o.model_file.empty(),
                 "--sync-batch-norm cannot apply to --model-file ", o.model_file,
                 ": a scripted graph's batch norms cannot be swapped for synchronized ones, so "
                 "each replica normalizes by its own slice's statistics (and the running "
                 "statistics are averaged between replicas, as buffers are); drop the flag, or "
                 "give the same global batch to fewer replicas");
  finish_task_options(o.task, s.task);
  // Rows of features have no image for the CNN: the MLP is their default.
  o.model = parse_model(!s.model.empty() ? s.model : o.task.uses_features() ? "mlp" : "cnn");
  o.mixed_precision = mixed_precision::policy_from_name(s.mixed_precision);
  if (!s.cross_device_ops.empty()) o.cross_device_ops = parse_cross_device_ops(s.cross_device_ops);
  o.progress = !s.no_progress;
  o.sync_batch_norm = !s.no_sync_batch_norm;
  o.check_collectives = !s.unchecked;
  o.communication_hook = gradient_compression(o.gradient_compression);
  o.sharding = parse_sharding(s.sharding);
  o.auto_shard = parse_auto_shard(s.auto_shard);
  finish_image_options(o.images, s.images);
  std::string compression = s.tfrecord_compression;
  for (auto& c : compression) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  o.tfrecord_compression = compression;
  apply_launcher_environment(o);
  check_options(o);
}

}  // namespace

std::string name_of(Loop loop) { return spelling(kLoops, loop); }
std::string name_of(StrategyKind strategy) { return spelling(kStrategies, strategy); }
std::string name_of(OptimizerKind optimizer) { return spelling(kOptimizers, optimizer); }
std::string name_of(ModelKind model) { return spelling(kModels, model); }
std::string name_of(AutoShardPolicy policy) { return spelling(kAutoShardPolicies, policy); }
Loop parse_loop(const std::string& text) { return parse(kLoops, "--loop", text); }
StrategyKind parse_strategy(const std::string& text) {
  return parse(kStrategies, "--strategy", text);
}
OptimizerKind parse_optimizer(const std::string& text) {
  return parse(kOptimizers, "--optimizer", text);
}
ModelKind parse_model(const std::string& text) { return parse(kModels, "--model", text); }
AutoShardPolicy parse_auto_shard(const std::string& text) {
  return parse(kAutoShardPolicies, "--auto-shard", text);
}

std::chrono::milliseconds whole_milliseconds(const char* flag, double seconds) {
  // Whole milliseconds reach the strategy: less than one would become 0. The upper bound keeps
  // the conversion defined (inf, 1e300) and deadlines from overflowing.
  DIST_CHECK_ARG(std::isfinite(seconds) && seconds >= 0.001 && seconds <= 1e9, flag,
                 " must be between 0.001 and 1e9 (seconds), got ", seconds);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

int64_t global_batch_of(const TrainOptions& options, int replicas) {
  return options.global_batch > 0 ? options.global_batch : options.batch_per_replica * replicas;
}

namespace {

// The count in environment variable `name`, set by dist-launch's `flag`; 0 when unset or empty.
int launcher_count(const char* name, const char* flag) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  DIST_CHECK_ARG(*end == '\0' && value >= 1 && value <= 4096, name,
                 " must be a whole number from 1 to 4096 (dist-launch ", flag, " sets it), got '",
                 text, "'");
  return static_cast<int>(value);
}

}  // namespace

void apply_launcher_environment(TrainOptions& options) {
  if (options.strategy != StrategyKind::kMultiWorker) return;
  if (options.replicas == 0)
    options.replicas = launcher_count("DIST_REPLICAS_PER_WORKER", "--replicas-per-worker");
  if (options.min_workers == 0)
    options.min_workers = launcher_count("DIST_MIN_WORKERS", "--workers MIN:MAX");
}

CommandLine parse_command_line(int argc, char** argv) {
  return parse_command_line(argc, argv, std::cout, std::cerr);
}

CommandLine parse_command_line(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CommandLine line;
  Spelled spelled;
  CLI::App app{"dist-train: train on Fashion-MNIST with a tf.distribute-style strategy"};
  add_job_flags(app, line.options, spelled);
  add_training_flags(app, line.options, spelled);
  add_data_and_output_flags(app, line.options, spelled);
  add_file_data_flags(app, line.options, spelled);
  add_image_flags(app, line.options.images, spelled.images);
  add_task_flags(app, spelled.task);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    line.exit_code = code == 0 ? 0 : 2;
    return line;
  }
  try {
    finish(line.options, spelled);
  } catch (const InvalidArgument& e) {
    err << "dist-train: " << e.what() << std::endl;
    line.exit_code = 2;
  }
  return line;
}

}  // namespace dist::tools
