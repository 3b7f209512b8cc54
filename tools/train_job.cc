#include "train_job.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "dist/core/allocator.h"
#include "dist/core/error.h"
#include "dist/data/mnist.h"
#include "dist/distribute/cluster_coordinator.h"
#include "dist/distribute/cluster_resolver.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"
#include "dist/train/mixed_precision.h"
#include "dist/train/preemption.h"
#include "dist/train/progress_bar.h"
#include "dist/train/safetensors.h"
#include "dist/train/summary_writer.h"

namespace dist::tools {
namespace {

using Clock = std::chrono::steady_clock;
using data::Element;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

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

void check_options(const TrainOptions& options) {
  mixed_precision::check_supported(mixed_precision::policy_from_name(options.mixed_precision));
  DIST_CHECK_ARG(options.epochs >= 1, "--epochs must be at least 1, got ", options.epochs);
  DIST_CHECK_ARG(std::isfinite(options.lr) && options.lr > 0,
                 "--lr must be a positive finite number, got ", options.lr);
  DIST_CHECK_ARG(options.max_steps == -1 || options.max_steps >= 1,
                 "--max-steps must be at least 1 (or -1 for no limit), got ", options.max_steps);
  DIST_CHECK_ARG(options.batch_per_replica >= 1, "--batch-per-replica must be at least 1, got ",
                 options.batch_per_replica);
  DIST_CHECK_ARG(options.global_batch >= 0, "--global-batch must be at least 1, got ",
                 options.global_batch);
}

namespace {

// Roles from TF_CONFIG. Every task of the job may share this host (dist-launch): each takes
// its share of the cores unless --threads says otherwise.
Strategy make_parameter_server_strategy(const TrainOptions& options) {
  DIST_CHECK_ARG(options.cross_device_ops.empty(),
                 "--cross-device-ops applies to mirrored and central_storage only, not to "
                 "--strategy parameter_server (the ps tasks apply the updates)");
  DIST_CHECK_ARG(options.replicas <= 1,
                 "--strategy parameter_server runs one replica per worker, but --replicas ",
                 options.replicas, " was given; add workers instead (dist-launch --workers N)");
  ParameterServerOptions ps;
  ps.cluster = cluster_config_from_environment();
  // The evaluator waits for the chief's checkpoints; without them it would wait in vain.
  DIST_CHECK_ARG(ps.cluster->cluster.num_tasks("evaluator") == 0 || !options.checkpoint_dir.empty(),
                 "the cluster has an evaluator task, which evaluates the checkpoints the chief "
                 "writes: give every task the same --checkpoint-dir");
  ps.rpc_timeout = whole_milliseconds("--collective-timeout", options.collective_timeout);
  ps.coordinator_timeout = ps.rpc_timeout;
  ps.startup_timeout = whole_milliseconds("--rendezvous-timeout", options.rendezvous_timeout);
  set_parameter_server_task_threads(options, *ps.cluster);
  return ParameterServerStrategy(ps);
}

}  // namespace

void set_parameter_server_task_threads(const TrainOptions& options, const ClusterConfig& cluster) {
  int tasks_here = 0;
  const std::string host = cluster.cluster.address(cluster.task).host;
  for (const auto& [type, addresses] : cluster.cluster.jobs())
    for (size_t i = 0; i < addresses.size(); ++i)
      if (cluster.cluster.address(TaskSpec{type, static_cast<int>(i)}).host == host) ++tasks_here;
  torch::set_num_threads(options.threads > 0 ? options.threads
                                             : std::max(1, available_cores() / tasks_here));
}

int64_t parameter_server_steps_per_epoch(const TrainOptions& options, int64_t num_train,
                                         int64_t global_batch) {
  return options.steps_per_epoch > 0 ? options.steps_per_epoch
                                     : (num_train + global_batch - 1) / global_batch;
}

data::Dataset per_worker_train_data(const data::Dataset& train, const InputContext& context) {
  const int64_t batches = train.cardinality();
  const int64_t offset =
      batches > 0 ? batches * context.input_pipeline_id / context.num_input_pipelines : 0;
  return train.repeat().skip(offset);
}

Strategy make_strategy(const TrainOptions& options) {
  DIST_CHECK_ARG(options.replicas >= 0, "--replicas must be at least 1, got ", options.replicas);
  DIST_CHECK_ARG(options.threads >= 0, "--threads must be at least 1, got ", options.threads);
  if (options.strategy == "mirrored" || options.strategy == "central_storage") {
    MirroredOptions mirrored;
    int replicas = options.replicas > 0 ? options.replicas : available_cores();
    for (int r = 0; r < replicas; ++r) mirrored.devices.push_back("cpu:" + std::to_string(r));
    mirrored.threads_per_replica = options.threads;
    if (options.strategy == "central_storage")
      mirrored.cross_device_ops = CrossDeviceOps::kReductionToOneDevice;
    if (!options.cross_device_ops.empty())
      mirrored.cross_device_ops = parse_cross_device_ops(options.cross_device_ops);
    if (options.strategy == "central_storage") return CentralStorageStrategy(mirrored);
    return MirroredStrategy(mirrored);
  }
  if (options.strategy == "multi_worker") {
    MultiWorkerOptions multi;
    multi.replicas_per_worker = options.replicas > 0 ? options.replicas : 1;
    if (const char* env = std::getenv("DIST_REPLICAS_PER_WORKER"); env && options.replicas == 0)
      multi.replicas_per_worker = std::atoi(env);
    multi.threads_per_replica = options.threads;
    multi.communication.timeout =
        whole_milliseconds("--collective-timeout", options.collective_timeout);
    multi.communication.rendezvous_timeout =
        whole_milliseconds("--rendezvous-timeout", options.rendezvous_timeout);
    multi.communication.check_collectives = options.check_collectives;
    // Resolved here to say where the cluster came from (TF_CONFIG, Slurm, MPI).
    const ResolvedCluster resolved = resolve_cluster();
    multi.cluster = resolved.config;
    if (resolved.config.cluster.collective_rank(resolved.config.task) == 0)
      std::cout << "Cluster: " << resolved.config.cluster.collective_tasks().size()
                << " workers from " << resolved.source << std::endl;
    return MultiWorkerMirroredStrategy(multi);
  }
  if (options.strategy == "parameter_server") return make_parameter_server_strategy(options);
  DIST_CHECK_ARG(options.cross_device_ops.empty(),
                 "--cross-device-ops applies to mirrored and "
                 "central_storage only, not to --strategy ",
                 options.strategy);
  DIST_CHECK_ARG(options.replicas <= 1, "--strategy ", options.strategy,
                 " runs exactly one replica, but --replicas ", options.replicas,
                 " was given; drop --replicas or use --strategy mirrored");
  // LibTorch's own default is one intra-op thread on some machines; a single replica gets
  // every core unless --threads says otherwise.
  torch::set_num_threads(options.threads > 0 ? options.threads : available_cores());
  if (options.strategy == "default") return get_default_strategy();
  if (options.strategy == "one_device") return OneDeviceStrategy("cpu:0");
  throw InvalidArgument("unknown --strategy '" + options.strategy +
                        "': use default, one_device, mirrored, central_storage, multi_worker or "
                        "parameter_server");
}

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

void check_output_paths(const TrainOptions& options) {
  if (!options.save_weights.empty()) {
    const std::filesystem::path path(options.save_weights);
    DIST_CHECK_ARG(!std::filesystem::is_directory(path), "--save-weights ", options.save_weights,
                   " is a directory; give a file name such as weights.safetensors");
    check_writable_directory("--save-weights",
                             path.has_parent_path() ? path.parent_path().string() : ".");
  }
  if (!options.log_dir.empty()) check_writable_directory("--log-dir", options.log_dir);
  if (!options.checkpoint_dir.empty())
    check_writable_directory("--checkpoint-dir", options.checkpoint_dir);
}

std::string exact(double value) {
  std::ostringstream out;
  out << std::setprecision(17) << value;
  return out.str();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> step_settings(const TrainOptions& options,
                                                               const JobSetup& job,
                                                               int64_t resume_step) {
  return {{"--loop", options.loop},
          {"--model", options.model},
          {"--optimizer", options.optimizer},
          {"--lr", exact(options.lr)},
          {"--seed", std::to_string(options.seed)},
          {"--epochs", std::to_string(options.epochs)},
          {"--max-steps", std::to_string(options.max_steps)},
          {"--steps-per-epoch", std::to_string(job.steps_per_epoch)},
          {"--mixed-precision", mixed_precision::policy_name(
                                    mixed_precision::policy_from_name(options.mixed_precision))},
          {"the global batch", std::to_string(job.global_batch)},
          {"the training examples", std::to_string(job.num_train)},
          {"the test examples", std::to_string(job.test.cardinality())},
          {"checkpoints (--checkpoint-dir)", options.checkpoint_dir.empty() ? "off" : "on"},
          {"--checkpoint-every", std::to_string(options.checkpoint_every)},
          {"the step resumed from",
           resume_step < 0 ? "none (a fresh start)" : std::to_string(resume_step)}};
}

namespace {

// start_job once the strategy exists.
JobSetup prepare_job(const Strategy& strategy, const TrainOptions& options,
                     std::ostream& chief_out) {
  // Only the chief prints and writes files; the others would repeat it, and two workers must
  // never write the same file.
  const bool chief = strategy.is_chief();
  const int replicas = strategy.num_replicas_in_sync();
  const int64_t global_batch = global_batch_of(options, replicas);
  if (chief) check_output_paths(options);
  if (chief) {
    chief_out << "Strategy: " << strategy.name() << "\nNumber of devices: " << replicas
              << "\nGlobal batch size: " << global_batch << std::endl;
    if (global_batch < replicas)
      chief_out << "Warning: the global batch (" << global_batch << ") is smaller than the "
                << "number of replicas (" << replicas
                << "); some replicas get empty batches every step" << std::endl;
  }
  data::Dataset examples = data::fashion_mnist(options.data_dir, data::Split::kTrain);
  if (options.train_examples > 0) examples = examples.take(options.train_examples);
  const int64_t num_train = examples.cardinality();
  data::Dataset train = examples.shuffle(num_train, options.seed).batch(global_batch).prefetch(2);
  data::Dataset test =
      data::fashion_mnist(options.data_dir, data::Split::kTest).batch(global_batch).prefetch(2);
  int64_t steps_per_epoch = 0;
  if (strategy.name() == "parameter_server") {
    steps_per_epoch = parameter_server_steps_per_epoch(options, num_train, global_batch);
    if (chief)
      chief_out << "Steps per epoch: " << steps_per_epoch << " (scheduled on the workers"
                << (options.steps_per_epoch > 0 ? ")" : "; one pass of the training data)")
                << std::endl;
  }
  return JobSetup{strategy,  chief,           replicas,         global_batch,
                  num_train, steps_per_epoch, std::move(train), std::move(test)};
}

}  // namespace

JobSetup start_job(const TrainOptions& options, std::ostream& chief_out) {
  check_options(options);
  DIST_CHECK_ARG(options.steps_per_epoch == -1 || options.steps_per_epoch >= 1,
                 "--steps-per-epoch must be at least 1 (or -1 for one pass of the data), got ",
                 options.steps_per_epoch);
  DIST_CHECK_ARG(options.steps_per_epoch == -1 || options.strategy == "parameter_server",
                 "--steps-per-epoch applies to --strategy parameter_server only (the other "
                 "strategies take whole passes of the data; use --max-steps to stop early)");
  DIST_CHECK_ARG(options.checkpoint_every >= 0, "--checkpoint-every must be at least 0, got ",
                 options.checkpoint_every);
  // Said here, on every task before its strategy is made: BackupAndRestore would refuse it on
  // the chief alone, in its own words (save_freq).
  DIST_CHECK_ARG(options.checkpoint_every == 0 || options.loop != "fit" ||
                     options.strategy != "parameter_server",
                 "--checkpoint-every ", options.checkpoint_every,
                 " is not supported with --loop fit under --strategy parameter_server: steps run "
                 "ahead of the chief, so a save within an epoch would not hold the step it "
                 "records; fit saves at epoch ends and stops (drop --checkpoint-every), or use "
                 "--loop custom, whose checkpoints wait for the scheduled steps");
  Strategy strategy = make_strategy(options);
  return failing_together(strategy, [&] { return prepare_job(strategy, options, chief_out); });
}

namespace {

std::shared_ptr<MirroredOptimizer> make_optimizer(const Strategy& strategy,
                                                  const Mirrored<torch::nn::Sequential>& model,
                                                  const TrainOptions& options) {
  if (options.optimizer == "adam")
    return strategy.mirror_optimizer<torch::optim::Adam>(model,
                                                         torch::optim::AdamOptions(options.lr));
  if (options.optimizer == "sgd")
    return strategy.mirror_optimizer<torch::optim::SGD>(model,
                                                        torch::optim::SGDOptions(options.lr));
  throw InvalidArgument("unknown --optimizer '" + options.optimizer + "': use adam or sgd");
}

std::vector<std::pair<std::string, torch::Tensor>> named_weights(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& item : module.named_parameters()) weights.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) weights.emplace_back(item.key(), item.value());
  return weights;
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

// Reads the checkpoint to resume from. When the latest of a directory is damaged, the
// DataError says which older ones are kept and how to resume from one.
void read_for_resume(Checkpoint& checkpoint, const std::string& path,
                     const CheckpointManager* manager, const TrainOptions& options) {
  try {
    checkpoint.read(path, options.env);
  } catch (const DataError& e) {
    if (manager == nullptr || !options.resume_from.empty()) throw;
    std::string older;
    for (const auto& kept : manager->checkpoints())
      if (kept != path) older = kept;  // oldest first: the last one is the newest
    if (older.empty()) throw;
    throw DataError(detail::concat(e.what(), "; an older checkpoint is kept: run again with ",
                                   "--resume-from ", older, " to resume from it"));
  }
}

// InvalidArgument if the checkpoint's data position was counted in other units than this
// run's (another global batch, shuffle seed or number of examples).
void check_same_run(const std::map<std::string, std::string>& values, const std::string& path,
                    const JobSetup& job, const TrainOptions& options) {
  auto same = [&](const char* key, const char* flag, const std::string& now) {
    const auto it = values.find(key);
    if (it == values.end()) return;  // written before checkpoints recorded it
    DIST_CHECK_ARG(it->second == now, "the checkpoint ", path, " was written with ", flag, " ",
                   it->second, " but this run has ", now,
                   ": its data position would be replayed in other units. Resume with ", flag, " ",
                   it->second, ", or start afresh with a new --checkpoint-dir");
  };
  same("run.global_batch", "--global-batch", std::to_string(job.global_batch));
  same("run.seed", "--seed", std::to_string(options.seed));
  same("run.train_examples", "--train-examples", std::to_string(job.num_train));
}

constexpr const char* kPsTrainStep = "dist-train/train_step";
// Steps scheduled ahead of the oldest unfinished one: enough to keep several workers busy, few
// enough that a stop (a signal, --max-steps) or a checkpoint waits for little.
constexpr size_t kStepsInFlight = 16;

// On ps and worker tasks: serve the chief's steps until it ends the job.
TrainResult serve_steps(ClusterCoordinator& coordinator, const Strategy& strategy) {
  if (coordinator.serve() != 0)
    throw CollectiveError(
        "heard nothing from the chief (the coordinator) within --collective-timeout; the chief "
        "is lost, so this task stops. Run the job again: with --checkpoint-dir the chief "
        "resumes from its last checkpoint");
  TrainResult result;
  result.chief = false;
  result.strategy = strategy.name();
  return result;
}

// Under ParameterServerStrategy: the epoch's remaining steps scheduled on the workers, at most
// kStepsInFlight ahead of the oldest unfinished one, each one's results handed to `take` in
// order. A checkpoint (every --checkpoint-every steps, at --max-steps, on a signal) waits until
// every scheduled step has finished, so it holds the weights of the step count it records.
// Returns whether the epoch ran to its end (not stopped by --max-steps or a signal).
bool schedule_epoch(const TrainOptions& options, const JobSetup& job,
                    ClusterCoordinator& coordinator, const PerWorkerDataset::Iterator& iterator,
                    int64_t& epoch_steps, int64_t& epoch_images, TrainResult& result,
                    const PreemptionWatcher& preemption,
                    const std::function<void(const std::map<std::string, at::Tensor>&)>& take,
                    const std::function<void()>& save) {
  const int64_t every = options.checkpoint_every;
  std::deque<RemoteValue> in_flight;
  int64_t scheduled = epoch_steps, saved_at = -1;
  bool stopping = false;
  for (;;) {
    for (;;) {
      // The step count once every scheduled step has finished.
      const int64_t next = result.steps + static_cast<int64_t>(in_flight.size());
      const bool at_checkpoint = every > 0 && !in_flight.empty() && next % every == 0;
      if (stopping || at_checkpoint || scheduled >= job.steps_per_epoch ||
          (options.max_steps > 0 && next >= options.max_steps) ||
          in_flight.size() >= kStepsInFlight)
        break;
      in_flight.push_back(coordinator.schedule(kPsTrainStep, iterator));
      ++scheduled;
    }
    if (in_flight.empty()) break;
    const auto sums = in_flight.front().fetch_dict();
    in_flight.pop_front();
    ++epoch_steps;
    ++result.steps;
    epoch_images += static_cast<int64_t>(sums.at("examples").item<double>());
    take(sums);
    stopping = stopping || preemption.requested();
    if (every > 0 && in_flight.empty() && result.steps % every == 0) {
      save();
      saved_at = result.steps;
    }
  }
  coordinator.join();  // every step was fetched; rethrows what a step failed with
  result.interrupted = stopping;
  const bool at_max = options.max_steps > 0 && result.steps >= options.max_steps;
  if ((stopping || at_max) && saved_at != result.steps) save();
  return !(stopping || at_max);
}

// The custom training loop, once the job is set up.
TrainResult run_custom_loop(const TrainOptions& options, JobSetup& job,
                            PreemptionWatcher& preemption, std::ostream& chief_out,
                            Clock::time_point job_start) {
  const Strategy& strategy = job.strategy;
  const bool chief = job.chief;
  std::ostream discard(nullptr);
  std::ostream& out = chief ? chief_out : discard;
  const int replicas = job.replicas;
  const int64_t global_batch = job.global_batch;
  auto train_data = strategy.experimental_distribute_dataset(job.train);
  auto test_data = strategy.experimental_distribute_dataset(job.test);

  torch::manual_seed(options.seed);
  auto model = strategy.mirror(models::make_model(options.model));
  auto optimizer = make_optimizer(strategy, model, options);
  SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, Reduction::kNone);
  const auto precision = mixed_precision::policy_from_name(options.mixed_precision);

  metrics::Mean train_loss("train_loss"), test_loss("test_loss");
  metrics::SparseCategoricalAccuracy train_accuracy("train_accuracy"),
      test_accuracy("test_accuracy");
  // One replica's share of a training step.
  auto train_replica = [&](const Element& b) {
    auto logits =
        mixed_precision::forward_in_policy([&] { return model->forward(b[0]); }, precision);
    auto loss = compute_average_loss(loss_fn(b[1], logits));
    loss.backward();
    optimizer->apply_gradients();
    train_accuracy.update_state(b[1], logits.detach());
    return loss.detach();
  };

  // Under ParameterServerStrategy the workers take the steps the chief schedules; the ps and
  // worker tasks serve until the chief is done.
  std::unique_ptr<ClusterCoordinator> coordinator;
  PerWorkerDataset per_worker;
  if (job.steps_per_epoch > 0) {
    coordinator = std::make_unique<ClusterCoordinator>(strategy);
    coordinator->register_function(
        kPsTrainStep, ClusterCoordinator::DictFunction([&](ScheduledCall& call) {
          const Element batch = call.next();
          model.train();
          // A worker runs one step at a time, so the metric counts this step's examples alone.
          train_accuracy.reset_state();
          const at::Tensor loss =
              strategy.reduce(ReduceOp::kSum, strategy.run(train_replica, batch));
          const auto [correct, examples] = train_accuracy.total_and_count();
          return std::map<std::string, at::Tensor>{
              {"loss", loss},
              {"correct", torch::tensor(correct, torch::kFloat64)},
              {"examples", torch::tensor(examples, torch::kFloat64)}};
        }));
    per_worker =
        coordinator->create_per_worker_dataset([train = job.train](const InputContext& context) {
          return per_worker_train_data(train, context);
        });
    if (!chief) return serve_steps(*coordinator, strategy);
  }

  std::ofstream metrics_log;
  if (chief && !options.log_dir.empty()) {
    std::filesystem::create_directories(options.log_dir);
    metrics_log.open(options.log_dir + "/metrics.jsonl", std::ios::app);
    DIST_CHECK_ARG(metrics_log.good(), "cannot write ", options.log_dir, "/metrics.jsonl");
  }
  // TensorBoard scalars as fit's TensorBoard callback writes them: LOG_DIR/train and
  // LOG_DIR/validation (the test set here), tags epoch_<metric>, step = the epoch from 0.
  std::optional<SummaryWriter> train_summary, validation_summary;
  if (metrics_log.is_open()) {
    train_summary.emplace(options.log_dir + "/train", options.env);
    validation_summary.emplace(options.log_dir + "/validation", options.env);
  }
  TrainResult result;
  result.chief = chief;
  result.strategy = strategy.name();
  result.num_replicas_in_sync = replicas;
  result.global_batch = global_batch;
  result.mixed_precision = mixed_precision::policy_name(precision);
  int64_t images = 0;
  const bool interactive = chief && ProgressBar::stdout_is_terminal();

  // Checkpoints: every worker reads the latest (the directory must be shared, as in
  // TensorFlow); only the chief writes. The partial epoch's metric sums travel along, so a
  // resumed epoch reports what an uninterrupted one would.
  std::optional<CheckpointManager> manager;
  Checkpoint checkpoint(model, optimizer.get());
  std::optional<data::IteratorPosition> resume_at;
  if (!options.checkpoint_dir.empty())
    manager.emplace(options.checkpoint_dir, options.max_to_keep, options.env);
  std::optional<std::string> resume_path;
  if (!options.resume_from.empty())
    resume_path = options.resume_from;
  else if (manager)
    resume_path = manager->latest();
  if (resume_path) {
    read_for_resume(checkpoint, *resume_path, manager ? &*manager : nullptr, options);
    check_same_run(checkpoint.state.values, *resume_path, job, options);
    result.steps = result.resumed_at_step = checkpoint.state.step;
    resume_at = checkpoint.state.position;
    out << "Resumed from " << *resume_path << " at step " << result.steps << " (epoch "
        << resume_at->epoch + 1 << ", batch " << resume_at->elements << ")" << std::endl;
  }
  // Every worker must take the same steps: compare what decides them before the first one.
  strategy.check_workers_agree(step_settings(options, job, result.resumed_at_step));
  auto metric_values = [&] {
    std::map<std::string, std::string> values;
    for (const Metric* m : std::initializer_list<const Metric*>{&train_loss, &train_accuracy}) {
      auto [total, count] = m->total_and_count();  // a collective: every worker calls it
      values[m->name() + ".total"] = nlohmann::json(total).dump();
      values[m->name() + ".count"] = nlohmann::json(count).dump();
    }
    return values;
  };
  auto save = [&](int64_t epoch, const data::IteratorPosition& position) {
    checkpoint.state.step = result.steps;
    checkpoint.state.epoch = epoch;
    checkpoint.state.position = position;
    checkpoint.state.values = metric_values();
    // What the data position is counted in: a resume with other values would misplace it.
    checkpoint.state.values["run.global_batch"] = std::to_string(global_batch);
    checkpoint.state.values["run.seed"] = std::to_string(options.seed);
    checkpoint.state.values["run.train_examples"] = std::to_string(job.num_train);
    if (chief) result.last_checkpoint = manager->save(checkpoint);
  };
  auto evaluate = [&] {
    model.eval();
    for (const auto& batch : test_data.iterator(0)) {
      strategy.run(
          [&](const Element& b) {
            torch::NoGradGuard no_grad;
            auto logits =
                mixed_precision::forward_in_policy([&] { return model->forward(b[0]); }, precision);
            test_loss.update_state(loss_fn(b[1], logits));
            test_accuracy.update_state(b[1], logits);
          },
          batch);
    }
  };

  const int first_epoch = resume_at ? static_cast<int>(resume_at->epoch) : 0;
  // One iterator per worker for the whole run; a resumed run starts the workers' data afresh
  // (their positions are not saved), at the pass of the epoch it resumes at.
  const auto per_worker_iterator = per_worker.iterator(first_epoch);
  const bool at_max_already = options.max_steps > 0 && result.steps >= options.max_steps;
  if (resume_at && (first_epoch >= options.epochs || at_max_already)) {
    // A finished job run again: say so, and report what the trained weights score.
    out << "Nothing left to train: the checkpoint is at step " << result.steps << ", the end of "
        << (at_max_already ? "--max-steps " + std::to_string(options.max_steps)
                           : "--epochs " + std::to_string(options.epochs))
        << " (raise it, or use a new --checkpoint-dir to train afresh); evaluating" << std::endl;
    evaluate();
    result.epochs = std::min(first_epoch, options.epochs);
    result.train_loss = result.train_accuracy = std::nan("");  // no training in this run
    result.test_loss = test_loss.result();
    result.test_accuracy = test_accuracy.result();
  }
  for (int epoch = first_epoch; epoch < options.epochs; ++epoch) {
    if (options.max_steps > 0 && result.steps >= options.max_steps) break;
    const bool resuming = resume_at && resume_at->epoch == epoch;
    train_loss.reset_state();
    train_accuracy.reset_state();
    test_loss.reset_state();
    test_accuracy.reset_state();
    if (resuming && chief) {
      auto value = [&](const std::string& key) {
        auto it = checkpoint.state.values.find(key);
        return it == checkpoint.state.values.end() ? 0.0 : std::stod(it->second);
      };
      for (Metric* m : std::initializer_list<Metric*>{&train_loss, &train_accuracy})
        m->restore_state(value(m->name() + ".total"), value(m->name() + ".count"));
    }
    out << "Epoch " << epoch + 1 << "/" << options.epochs << std::endl;
    ProgressBar bar(out, coordinator ? job.steps_per_epoch : train_data.cardinality(), interactive);

    model.train();
    const auto epoch_start = Clock::now();
    int64_t epoch_steps = resuming ? resume_at->elements : 0, epoch_images = 0;
    bool epoch_complete = true;
    if (coordinator) {
      epoch_complete = schedule_epoch(
          options, job, *coordinator, per_worker_iterator, epoch_steps, epoch_images, result,
          preemption,
          [&](const std::map<std::string, at::Tensor>& sums) {
            train_loss.update_state(sums.at("loss"));
            const auto [correct, examples] = train_accuracy.total_and_count();
            train_accuracy.restore_state(correct + sums.at("correct").item<double>(),
                                         examples + sums.at("examples").item<double>());
            if (options.progress && chief)
              bar.update(epoch_steps,
                         "loss: " + fixed(train_loss.local_result(), 4) +
                             " - accuracy: " + fixed(train_accuracy.local_result(), 4));
          },
          [&] {
            if (manager) save(epoch, data::IteratorPosition{epoch, epoch_steps});
          });
    } else {
      auto batches = resuming ? train_data.iterator_at(*resume_at) : train_data.iterator(epoch);
      for (const auto& batch : batches) {
        auto losses = strategy.run(train_replica, batch);
        train_loss.update_state(strategy.reduce(ReduceOp::kSum, losses));
        ++epoch_steps;
        ++result.steps;
        epoch_images += batch.global_batch_size();
        // local_result: progress is the chief's alone and must not be a collective.
        if (options.progress && chief)
          bar.update(epoch_steps, "loss: " + fixed(train_loss.local_result(), 4) +
                                      " - accuracy: " + fixed(train_accuracy.local_result(), 4));
        const bool at_max = options.max_steps > 0 && result.steps >= options.max_steps;
        // Agreed by all workers, so they stop at the same step.
        result.interrupted = strategy.any_worker(preemption.requested());
        if (manager &&
            (result.interrupted || at_max ||
             (options.checkpoint_every > 0 && result.steps % options.checkpoint_every == 0)))
          save(epoch, batches.position());
        if (result.interrupted || at_max) {
          epoch_complete = false;
          break;
        }
      }
    }
    bar.finish();
    if (result.interrupted) {
      out << "Stopped by signal " << preemption.signal_number() << " after step " << result.steps
          << (manager ? "; checkpoint saved, rerun the same command to resume"
                      : "; nothing saved (no --checkpoint-dir)")
          << std::endl;
      break;
    }
    const double epoch_train_seconds = seconds_since(epoch_start);
    result.train_seconds += epoch_train_seconds;
    images += epoch_images;

    evaluate();
    result.epochs = epoch + 1;
    result.train_loss = train_loss.result();
    result.train_accuracy = train_accuracy.result();
    result.test_loss = test_loss.result();
    result.test_accuracy = test_accuracy.result();
    const double epoch_images_per_sec = epoch_images / std::max(epoch_train_seconds, 1e-9);
    out << "Epoch " << epoch + 1 << ": loss " << fixed(result.train_loss, 4) << " - accuracy "
        << fixed(result.train_accuracy, 4) << " - test loss " << fixed(result.test_loss, 4)
        << " - test accuracy " << fixed(result.test_accuracy, 4) << " - "
        << fixed(seconds_since(epoch_start), 1) << "s - " << fixed(epoch_images_per_sec, 0)
        << " images/s" << std::endl;

    if (metrics_log.is_open()) {
      metrics_log << nlohmann::json{{"epoch", epoch + 1},
                                    {"step", result.steps},
                                    {"train_loss", result.train_loss},
                                    {"train_accuracy", result.train_accuracy},
                                    {"test_loss", result.test_loss},
                                    {"test_accuracy", result.test_accuracy},
                                    {"images_per_sec", epoch_images_per_sec}}
                         .dump()
                  << std::endl;
    }
    if (train_summary) {
      train_summary->scalar("epoch_loss", result.train_loss, epoch);
      train_summary->scalar("epoch_accuracy", result.train_accuracy, epoch);
      validation_summary->scalar("epoch_loss", result.test_loss, epoch);
      validation_summary->scalar("epoch_accuracy", result.test_accuracy, epoch);
      train_summary->flush();
      validation_summary->flush();
    }
    // A stop at --max-steps saved its mid-epoch position above; do not skip the epoch's rest.
    if (manager && epoch_complete) save(epoch + 1, data::IteratorPosition{epoch + 1, 0});
  }

  if (chief && !options.save_weights.empty()) {
    model.variables().prepare_to_read();  // under ParameterServerStrategy: from the ps tasks
    save_safetensors(options.save_weights, named_weights(*model.primary()),
                     {{"model", options.model}, {"step", std::to_string(result.steps)}},
                     options.env);
  }

  result.images_per_sec = images / std::max(result.train_seconds, 1e-9);
  result.seconds = seconds_since(job_start);
  return result;
}

}  // namespace

TrainResult run_training(const TrainOptions& options, std::ostream& chief_out) {
  if (options.loop == "fit") return run_fit_training(options, chief_out);
  DIST_CHECK_ARG(options.loop == "custom", "unknown --loop '", options.loop,
                 "': use custom or fit");
  const auto job_start = Clock::now();
  // From the start: a SIGTERM during start-up (dist-launch stopping the job) then stops after
  // the first step, resumably, instead of killing the process.
  PreemptionWatcher preemption;
  JobSetup job = start_job(options, chief_out);
  return failing_together(job.strategy, [&] {
    return run_custom_loop(options, job, preemption, chief_out, job_start);
  });
}

std::string to_json_line(const TrainResult& r) {
  return nlohmann::json{{"strategy", r.strategy},
                        {"num_replicas_in_sync", r.num_replicas_in_sync},
                        {"global_batch", r.global_batch},
                        {"epochs", r.epochs},
                        {"steps", r.steps},
                        {"seconds", r.seconds},
                        {"train_seconds", r.train_seconds},
                        {"images_per_sec", r.images_per_sec},
                        {"train_loss", r.train_loss},
                        {"train_accuracy", r.train_accuracy},
                        {"test_loss", r.test_loss},
                        {"test_accuracy", r.test_accuracy},
                        {"resumed_at_step", r.resumed_at_step},
                        {"interrupted", r.interrupted},
                        {"mixed_precision", r.mixed_precision},
                        // What the figures ran on: malloc decides speed (issue 13).
                        {"malloc", malloc_name()}}
      .dump();
}

}  // namespace dist::tools
