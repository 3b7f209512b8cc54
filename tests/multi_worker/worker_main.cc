// A worker process for the multi-worker tests: reads TF_CONFIG, runs one scenario, reports
// on stdout, and exits 0 on success. The tests (multi_worker_test.cc) fork several of these
// on 127.0.0.1.
//
//   dist_test_worker equivalence REPLICAS OUT_FILE [BYTES_PER_PACK overlap|after_backward]
//                                                    20 SGD steps; chief saves the weights
//   dist_test_worker cyclegan adam|sgd OUT_FILE      3 CycleGAN steps (four models, each
//                                                    model's gradients from its own loss,
//                                                    overlapped reduction); chief saves all
//                                                    four models' weights and the losses
//   dist_test_worker centering OUT_FILE              2 replicas, gradients overlapped with
//                                                    backward: 20 SGD steps of a layer that
//                                                    all-reduces in forward and backward;
//                                                    chief saves the weights
//   dist_test_worker conformance REPLICAS OUT_PREFIX (sgd|adam FROM TO RESTORE SAVE)...
//                                                    strategy conformance runs, one after
//                                                    another in the same processes
//                                                    (equivalence_data.h; RESTORE and SAVE
//                                                    "-" for none); the chief saves run i's
//                                                    weights as OUT_PREFIX.<i>
//   dist_test_worker collectives REPLICAS            exact integer collectives
//   dist_test_worker model HIDDEN                    mirror an MLP of this width, one step
//   dist_test_worker batchnorm OUT_PREFIX            keras fit of a model with batch norm;
//                                                    every worker saves its weights and
//                                                    buffers as OUT_PREFIX.<rank>
//   dist_test_worker sync_batchnorm REPLICAS OUT_PREFIX
//                                                    the same with synchronized batch norm
//   dist_test_worker sync_batchnorm_module OUT       train_batch_norm_steps (SyncBatchNorm
//                                                    modules), 2 replicas, packs sent during
//                                                    backward; the chief saves the result
//   dist_test_worker stopped_fit DIR                 keras fit of the same model with
//                                                    ModelCheckpoint (DIR/epoch<N>) and an
//                                                    EarlyStopping that stops after epoch 2
//                                                    and restores epoch 1's weights; the chief
//                                                    saves them as DIR/final
//   dist_test_worker train_forever                   trains until killed, prints "step N"
//   dist_test_worker input_steps ROWS0 ROWS          one epoch of a distributed dataset of
//                                                    ROWS0 rows (worker 0) or ROWS (the others)
//                                                    in global batches of 4, around a
//                                                    collective of cross-replica code; prints
//                                                    the steps' global batch sizes
//   dist_test_worker step_by_packs OUT overlap|after_backward own|shared
//                                                    20 Adam steps of an MLP, one replica,
//                                                    4 KB packs;
//                                                    chief saves the weights; prints how the
//                                                    last optimizer step went
//   dist_test_worker shared_variables on|off|write_in_place REPLICAS OUT
//                                                    Adam on an MLP: 3 steps, a checkpoint, 2
//                                                    steps, every worker restores it, 3 steps;
//                                                    the chief writes the last checkpoint to
//                                                    OUT; prints whether the variables live in
//                                                    shared memory. write_in_place: after 3
//                                                    steps every worker changes a weight by hand
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/keras/callbacks.h"
#include "dist/models/reference_models.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"
#include "dist/train/safetensors.h"
#include "distribute/step/optimizer_shards.h"
#include "distribute/strategies/mirrored_extended.h"
#include "equivalence_data.h"
#include "keras/keras_test_models.h"

namespace {

using dist::data::Element;

dist::MultiWorkerOptions options_from_env(int replicas) {
  dist::MultiWorkerOptions options;
  options.replicas_per_worker = replicas;
  options.threads_per_replica = 1;
  // "ring": Gloo over TCP even on one host (the default, kAuto, uses shared memory there).
  if (const char* i = std::getenv("DIST_TEST_IMPLEMENTATION"); i && std::string(i) == "ring")
    options.communication.implementation = dist::CommunicationOptions::Implementation::kRing;
  if (const char* s = std::getenv("DIST_TEST_SHARDING")) options.sharding = dist::parse_sharding(s);
  if (const char* r = std::getenv("DIST_TEST_SHARDING_REUSE_BYTES"))
    options.sharding_reuse_bytes = std::atoll(r);
  if (const char* b = std::getenv("DIST_TEST_BYTES_PER_PACK"))
    options.communication.bytes_per_pack = std::atoll(b);
  if (const char* t = std::getenv("DIST_TEST_TIMEOUT_MS")) {
    options.communication.timeout = std::chrono::milliseconds(std::atoi(t));
    options.communication.rendezvous_timeout = std::chrono::milliseconds(std::atoi(t));
  }
  return options;
}

// 2 replicas whose gradient packs (64 bytes) are sent during backward train with `train`; the
// chief saves what it returns.
int overlapped_two_replicas(
    const std::string& out,
    const std::function<std::vector<std::pair<std::string, torch::Tensor>>(const dist::Strategy&)>&
        train) {
  auto options = options_from_env(2);
  options.communication.bytes_per_pack = 64;  // packs complete, and are sent, during backward
  options.communication.overlap_with_backward = true;
  dist::MultiWorkerMirroredStrategy strategy(options);
  auto values = train(strategy);
  if (strategy.is_chief()) dist::save_safetensors(out, values);
  std::cout << "trained " << strategy.num_replicas_in_sync() << " replicas" << std::endl;
  return 0;
}

int equivalence(int replicas, const std::string& out, int64_t bytes_per_pack = 0,
                const std::string& reduce = "overlap") {
  auto options = options_from_env(replicas);
  if (bytes_per_pack > 0) options.communication.bytes_per_pack = bytes_per_pack;
  options.communication.overlap_with_backward = reduce == "overlap";
  dist::MultiWorkerMirroredStrategy strategy(options);
  // With explicit packs, also a collective between backward and apply_gradients: with
  // overlap it must come after the step's packs on every worker.
  auto all_reduce_loss = [](const torch::Tensor& loss) {
    dist::get_replica_context()->all_reduce(dist::ReduceOp::kSum, loss.detach());
  };
  auto weights = bytes_per_pack > 0
                     ? dist::testing::train_equivalence_steps(strategy, false, all_reduce_loss)
                     : dist::testing::train_equivalence_steps(strategy);
  if (strategy.is_chief()) dist::save_safetensors(out, weights);
  std::cout << "trained " << strategy.num_replicas_in_sync() << " replicas" << std::endl;
  return 0;
}

// 20 Adam steps of the equivalence MLP, one replica per worker, gradients in packs of 4 KB (a
// pack per parameter). `reduce`: overlap (packs land one by one, so the step may go by packs) or
// after_backward (the whole step once every pack is reduced); `variables`: own (each worker
// steps its own copy) or shared (the default: workers of one host would share one copy and
// split the step, but over TCP they cannot, and find out at the second step). Every worker says how
// its last step went.
int step_by_packs(const std::string& out, const std::string& reduce, const std::string& variables) {
  auto options = options_from_env(1);
  options.communication.bytes_per_pack = 4096;
  options.communication.overlap_with_backward = reduce == "overlap";
  options.communication.share_variables_on_host = variables == "shared";
  dist::MultiWorkerMirroredStrategy strategy(options);
  torch::manual_seed(7);
  auto model = strategy.mirror(dist::testing::make_equivalence_mlp());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  auto weights = dist::testing::train_one_pass(strategy, model, *optimizer);
  if (strategy.is_chief()) dist::save_safetensors(out, weights);
  const auto& placed = dynamic_cast<const dist::MirroredVariables&>(*model.shared_variables());
  const dist::OptimizerShards* split = placed.step_plan().last_split();
  std::cout << "last step: "
            << (split ? "by " + std::to_string(split->shares()) + " packs" : std::string("whole"))
            << std::endl;
  return 0;
}

int conformance(int replicas, const std::string& out_prefix, int runs, char** args) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(replicas));
  auto none_if_dash = [](const std::string& path) { return path == "-" ? "" : path; };
  for (int i = 0; i < runs; ++i, args += 5) {
    dist::testing::ConformanceRun run;
    run.adam = std::string(args[0]) == "adam";
    run.from = std::atoi(args[1]);
    run.to = std::atoi(args[2]);
    run.restore_from = none_if_dash(args[3]);
    run.save_to = none_if_dash(args[4]);
    auto weights = dist::testing::train_conformance_steps(strategy, run);
    if (strategy.is_chief()) dist::save_safetensors(out_prefix + "." + std::to_string(i), weights);
  }
  std::cout << "trained " << strategy.num_replicas_in_sync() << " replicas" << std::endl;
  return 0;
}

int cyclegan(const std::string& optimizer, const std::string& out) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(1));
  auto weights = dist::testing::train_cyclegan_steps(strategy, optimizer == "adam");
  if (strategy.is_chief()) dist::save_safetensors(out, weights);
  std::cout << "trained the CycleGAN on " << strategy.num_replicas_in_sync() << " replicas"
            << std::endl;
  return 0;
}

int batchnorm(const std::string& out_prefix, int replicas = 1, bool synchronized = false) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(replicas));
  auto model = dist::testing::keras_batchnorm_fit(strategy, synchronized);
  int released = 0, parameters = 0;  // at sharding 'parameters': every one, between steps
  for (const auto& p : model.module()->parameters()) {
    released += p.numel() == 0;
    ++parameters;
  }
  std::cout << "released " << released << " of " << parameters << " parameters" << std::endl;
  model.gather_weights();  // every worker: at sharding 'parameters' each keeps shares
  model.save_weights(out_prefix + "." + std::to_string(strategy.extended().first_replica_id()));
  std::cout << "fitted" << std::endl;
  return 0;
}

int stopped_fit(const std::string& dir) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(1));
  torch::manual_seed(3);
  dist::keras::Model model = dist::testing::keras_residual_model();
  model.compile(strategy, dist::keras::optimizers::SGD(0.05),
                dist::SparseCategoricalCrossentropy(true));
  torch::manual_seed(5);
  auto x = torch::rand({64, 1, 15, 15});
  auto y = torch::randint(0, 10, {64});
  dist::keras::FitOptions options;
  options.epochs = 4;
  options.verbose = 0;
  // The loss never improves by 100: the first epoch is the best, the second stops the fit.
  auto stopping = std::make_shared<dist::keras::callbacks::EarlyStopping>(
      "loss", /*patience=*/0, /*min_delta=*/100, "min", /*restore_best_weights=*/true);
  options.callbacks = {
      std::make_shared<dist::keras::callbacks::ModelCheckpoint>(dir + "/epoch{epoch}"), stopping};
  model.fit(dist::data::Dataset::from_tensor_slices({x, y}).batch(16), options);
  model.gather_weights();
  if (strategy.is_chief()) model.save_weights(dir + "/final");
  std::cout << "stopped after epoch " << stopping->stopped_epoch() << std::endl;
  return 0;
}

int collectives(int replicas) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(replicas));
  const int64_t n = strategy.num_replicas_in_sync();
  int failures = 0;
  for (int64_t count : {0, 1, 7, 1000}) {
    auto results = strategy.run([count] {
      auto* ctx = dist::get_replica_context();
      const int64_t r = ctx->replica_id_in_sync_group();
      auto values = torch::arange(count, torch::kInt64) * (r + 1);
      return std::vector<torch::Tensor>{ctx->all_reduce(dist::ReduceOp::kSum, values),
                                        ctx->all_reduce(dist::ReduceOp::kMax, values),
                                        ctx->all_reduce(dist::ReduceOp::kMin, values),
                                        ctx->all_gather(torch::full({r + 1}, r, torch::kInt64), 0)};
    });
    auto i = torch::arange(count, torch::kInt64);
    std::vector<int64_t> gathered;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t k = 0; k <= r; ++k) gathered.push_back(r);
    for (const auto& r : results.values()) {
      failures += !torch::equal(r[0], i * (n * (n + 1) / 2));
      failures += !torch::equal(r[1], i * n);
      failures += !torch::equal(r[2], i);
      failures += !torch::equal(r[3], torch::tensor(gathered, torch::kInt64));
    }
  }
  auto per_replica = strategy.run([] {
    return torch::full({3}, dist::get_replica_context()->replica_id_in_sync_group() + 1,
                       torch::kInt64);
  });
  failures += !torch::equal(strategy.reduce(dist::ReduceOp::kSum, per_replica),
                            torch::full({3}, n * (n + 1) / 2, torch::kInt64));
  failures += strategy.reduce(dist::ReduceOp::kMax, per_replica, 0).item<int64_t>() != n;
  failures += strategy.gather(per_replica, 0).size(0) != 3 * n;
  // Metrics sum across workers: replica r adds r+1 values of r.
  dist::metrics::Mean mean("mean");
  strategy.run([&] {
    const int64_t r = dist::get_replica_context()->replica_id_in_sync_group();
    mean.update_state(torch::full({r + 1}, static_cast<double>(r)));
  });
  double expected = 0, count = 0;
  for (int64_t r = 0; r < n; ++r) expected += r * (r + 1.0), count += r + 1.0;
  failures += std::abs(mean.result() - expected / count) > 1e-12;
  std::cout << (failures == 0 ? "collectives exact" : "collectives WRONG") << " for " << n
            << " replicas" << std::endl;
  return failures == 0 ? 0 : 1;
}

int model(int hidden) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(1));
  auto net = strategy.mirror(dist::models::make_mlp(hidden));
  std::cout << "model check passed" << std::endl;
  return 0;
}

// After the epoch's first step, the steps of a dataset whose every worker has the same number of
// batches take no collective: worker 0 can finish the epoch before the any_worker collective
// that the others issue after their first step. Inputs of different lengths need an agreement
// before every step, so there every worker takes its steps before that collective.
int input_steps(int64_t rows_of_worker_0, int64_t rows_of_the_others) {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(1));
  const bool first = strategy.worker_index() == 0;
  const int64_t rows = first ? rows_of_worker_0 : rows_of_the_others;
  auto data = strategy.experimental_distribute_dataset(
      dist::data::Dataset::from_tensor_slices({torch::arange(rows)}).batch(4));
  auto it = data.iterator();
  std::string sizes;
  auto take = [&](int64_t steps) {
    for (int64_t i = 0; i < steps; ++i) {
      auto batch = it.next();
      if (!batch) return;
      sizes += (sizes.empty() ? "" : ",") + std::to_string(batch->global_batch_size());
    }
  };
  take(first || rows_of_worker_0 != rows_of_the_others ? 1000 : 1);
  strategy.any_worker(false);
  take(1000);
  std::cout << "global batches " << sizes << std::endl;
  return 0;
}

int train_forever() {
  dist::MultiWorkerMirroredStrategy strategy(options_from_env(1));
  torch::manual_seed(1);
  auto model = strategy.mirror(dist::models::make_mlp(64));
  auto opt = strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.01));
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  auto data = strategy.experimental_distribute_dataset(
      dist::data::Dataset::from_tensor_slices(
          {torch::rand({64, 1, 28, 28}), torch::randint(0, 10, {64})})
          .batch(16)
          .repeat());
  int64_t step = 0;
  for (const auto& batch : data.iterator()) {
    strategy.run(
        [&](const Element& b) {
          auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          opt->apply_gradients();
        },
        batch);
    std::cout << "step " << ++step << std::endl;
  }
  return 0;
}

// Whether `address` lies in a mapping of a distribute shared-memory segment (/dev/shm/dist-*).
bool in_shared_memory(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(address));
  for (std::string line; std::getline(maps, line);) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) == 2 && lo <= at && at < hi)
      return line.find("/dev/shm/dist-") != std::string::npos;
  }
  return false;
}

int shared_variables(const std::string& mode, int replicas, const std::string& out) {
  auto options = options_from_env(replicas);
  options.communication.share_variables_on_host = mode != "off";
  dist::MultiWorkerMirroredStrategy strategy(options);
  torch::manual_seed(3);
  // 407k parameters: at least 64Ki per share with 2 workers x 2 replicas.
  auto model = strategy.mirror(dist::models::make_mlp(512));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  auto data = strategy.experimental_distribute_dataset(
      dist::data::Dataset::from_tensor_slices(
          {torch::rand({96, 1, 28, 28}), torch::randint(0, 10, {96})})
          .batch(32)
          .repeat());
  auto it = data.iterator();
  auto steps = [&](int n) {
    for (int i = 0; i < n; ++i)
      strategy.run(
          [&](const Element& b) {
            auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
            loss.backward();
            optimizer->apply_gradients();
          },
          it.next().value());
  };
  dist::Checkpoint checkpoint(model, optimizer.get());
  steps(3);
  if (mode == "write_in_place") {
    // Every worker halves a weight by hand: with one shared copy it would be quartered.
    torch::NoGradGuard no_grad;
    model.primary()->parameters()[0].mul_(0.5);
    steps(1);  // refused with a CollectiveError on every worker
    return 0;
  }
  if (strategy.is_chief()) checkpoint.write(out + ".mid");
  steps(2);
  // Nobody reads the checkpoint before the chief wrote it (a collective orders them).
  strategy.run(
      [] { dist::get_replica_context()->all_reduce(dist::ReduceOp::kSum, torch::ones({1})); });
  // Back to step 3: other values than the current ones, written in place by every worker, and
  // new storage for the slots; shared again at the next step.
  checkpoint.read(out + ".mid");
  steps(3);
  if (strategy.is_chief()) checkpoint.write(out);
  auto variables = model.shared_variables();
  bool shared = !optimizer->optimizer().state().empty();
  for (const auto& [key, state] : optimizer->optimizer().state()) {
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(*state);
    shared = shared && in_shared_memory(adam.exp_avg().data_ptr()) &&
             in_shared_memory(adam.exp_avg_sq().data_ptr());
  }
  for (int r = 0; r < variables->num_replicas(); ++r)
    for (const auto& p : variables->replica(r)->parameters())
      shared = shared && in_shared_memory(p.data_ptr());
  std::cout << "parameters and slots in shared memory: " << (shared ? "yes" : "no") << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "equivalence" && argc == 4) return equivalence(std::atoi(argv[2]), argv[3]);
    if (scenario == "equivalence" && argc == 6)
      return equivalence(std::atoi(argv[2]), argv[3], std::atoll(argv[4]), argv[5]);
    if (scenario == "step_by_packs" && argc == 5) return step_by_packs(argv[2], argv[3], argv[4]);
    if (scenario == "conformance" && argc > 4 && (argc - 4) % 5 == 0)
      return conformance(std::atoi(argv[2]), argv[3], (argc - 4) / 5, argv + 4);
    if (scenario == "cyclegan" && argc == 4) return cyclegan(argv[2], argv[3]);
    if (scenario == "centering" && argc == 3)
      return overlapped_two_replicas(argv[2], [](const dist::Strategy& strategy) {
        return dist::testing::train_global_centering_steps(strategy);
      });
    if (scenario == "batchnorm" && argc == 3) return batchnorm(argv[2]);
    if (scenario == "sync_batchnorm" && argc == 4)
      return batchnorm(argv[3], std::atoi(argv[2]), /*synchronized=*/true);
    if (scenario == "sync_batchnorm_module" && argc == 3)
      return overlapped_two_replicas(argv[2], [](const dist::Strategy& strategy) {
        return dist::testing::train_batch_norm_steps(strategy);
      });
    if (scenario == "stopped_fit" && argc == 3) return stopped_fit(argv[2]);
    if (scenario == "collectives" && argc == 3) return collectives(std::atoi(argv[2]));
    if (scenario == "model" && argc == 3) return model(std::atoi(argv[2]));
    if (scenario == "train_forever") return train_forever();
    if (scenario == "input_steps" && argc == 4)
      return input_steps(std::atoll(argv[2]), std::atoll(argv[3]));
    if (scenario == "shared_variables" && argc == 5)
      return shared_variables(argv[2], std::atoi(argv[3]), argv[4]);
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << std::endl;
    return 1;
  }
  std::cerr << "usage: dist_test_worker equivalence|collectives|model|train_forever ..."
            << std::endl;
  return 2;
}
