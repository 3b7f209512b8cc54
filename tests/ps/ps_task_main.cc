// One task of a ParameterServerStrategy job for the tests in ps_job_test.cc: the same binary
// runs as chief, worker and ps, as a user's would. Reads TF_CONFIG; exits 0 on success.
//
//   dist_test_ps_task train sgd|adam STEPS OUT   STEPS steps of the equivalence data's batches
//                                                (the tutorial CNN, seed 7, as the one-device
//                                                reference in equivalence_data.h); the chief
//                                                schedules each and, with DIST_TEST_SYNC=1,
//                                                joins after each; it saves the final weights
//                                                (read from the ps tasks) to OUT.
//   dist_test_ps_task embedding ROWS DIM STEPS OUT
//                                                STEPS synchronous SGD steps of EmbeddingNet
//                                                (embedding_model.h) over embedding_data; each
//                                                worker prints the bytes each step moved, the
//                                                chief saves the final weights to OUT ("-":
//                                                not saved). DIST_TEST_OPTIMIZER=adagrad (else
//                                                SGD), DIST_TEST_ID_LIMIT=N: ids below N only.
//
// With DIST_TEST_CHECKPOINT=PATH the chief writes a checkpoint there after the last step (the
// existing format); in "train" it also restores PATH before the first step if it exists.
//
// Environment: DIST_TEST_TIMEOUT_MS (rpc and coordinator timeouts), DIST_TEST_PS_SHARDS (a
// fixed-shards partitioner), DIST_TEST_STEP_SLEEP_MS (each step sleeps this long first, so a
// test can kill a worker in the middle of one), DIST_TEST_PAUSE_AFTER=K with
// DIST_TEST_RESUME_FILE=PATH ("train": after K steps the chief joins them, prints "paused after
// K steps" and schedules no more until PATH exists, so a test can kill a worker between steps;
// it gives up with exit 1 after 60 s).
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/distribute/cluster_coordinator.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "ps/embedding_model.h"

namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoll(value) : fallback;
}

dist::ParameterServerOptions options_from_env() {
  dist::ParameterServerOptions options;
  const auto timeout = std::chrono::milliseconds(env_int("DIST_TEST_TIMEOUT_MS", 20000));
  options.rpc_timeout = timeout;
  options.coordinator_timeout = timeout;
  options.startup_timeout = timeout;
  if (const int64_t shards = env_int("DIST_TEST_PS_SHARDS", 0); shards > 0)
    options.partitioner = dist::Partitioner::fixed_shards(static_cast<int>(shards));
  return options;
}

// One training step of both scenarios on `batch`: the worker's mean loss after the update.
template <class M>
at::Tensor train_on(const dist::Strategy& strategy, const dist::Mirrored<M>& model,
                    dist::MirroredOptimizer& optimizer, const dist::data::Element& batch) {
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  auto losses = strategy.run(
      [&](const dist::data::Element& b) {
        auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
        loss.backward();
        optimizer.apply_gradients();
        return loss.detach();
      },
      batch);
  return strategy.reduce(dist::ReduceOp::kSum, losses);
}

// Joins the `done` steps scheduled so far (every worker is then between steps) and waits for
// the file DIST_TEST_RESUME_FILE names.
void pause_until_resumed(dist::ClusterCoordinator& coordinator, int done) {
  coordinator.join();
  const char* resume_file = std::getenv("DIST_TEST_RESUME_FILE");
  if (!resume_file) throw std::runtime_error("DIST_TEST_PAUSE_AFTER needs DIST_TEST_RESUME_FILE");
  std::cout << "paused after " << done << " steps" << std::endl;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::ifstream(resume_file).good()) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(std::string("no ") + resume_file + " within 60 s of the pause");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void save_weights(const torch::nn::Module& module, const std::string& out) {
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& p : module.named_parameters())
    weights.emplace_back(p.key(), p.value().detach().clone());
  dist::save_safetensors(out, weights);
}

int train(const std::string& optimizer_kind, int steps, const std::string& out) {
  dist::ParameterServerStrategy strategy(options_from_env());
  torch::manual_seed(7);
  auto model = strategy.mirror(dist::models::make_tutorial_cnn());
  auto optimizer =
      optimizer_kind == "adam"
          ? strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3))
          : strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  dist::ClusterCoordinator coordinator(strategy);
  const auto sleep = std::chrono::milliseconds(env_int("DIST_TEST_STEP_SLEEP_MS", 0));
  coordinator.register_function("train_step", [&](dist::ScheduledCall& call) {
    const dist::data::Element batch = call.next();
    std::this_thread::sleep_for(sleep);
    const at::Tensor loss = train_on(strategy, model, *optimizer, batch);
    std::cout << "step done on worker:" << call.worker_index() << std::endl;
    return loss;
  });
  auto dataset = coordinator.create_per_worker_dataset(
      [](const dist::InputContext&) { return dist::testing::equivalence_data().repeat(-1); });
  if (!strategy.is_chief()) return coordinator.serve();

  const char* checkpoint_path = std::getenv("DIST_TEST_CHECKPOINT");
  dist::Checkpoint checkpoint(model, optimizer.get());
  if (checkpoint_path && std::ifstream(checkpoint_path).good()) {
    checkpoint.read(checkpoint_path);  // the restored values become the ps tasks'
    std::cout << "restored " << checkpoint_path << std::endl;
  }
  const bool sync = env_int("DIST_TEST_SYNC", 0) == 1;
  const int64_t pause_after = env_int("DIST_TEST_PAUSE_AFTER", -1);
  std::vector<dist::RemoteValue> losses;
  for (int i = 0; i < steps; ++i) {
    if (i == pause_after) pause_until_resumed(coordinator, i);
    losses.push_back(coordinator.schedule("train_step", dataset.iterator()));
    if (sync) coordinator.join();
  }
  coordinator.join();
  for (size_t i = 0; i < losses.size(); ++i)
    std::cout << "loss " << i << " " << losses[i].fetch().item<double>() << std::endl;
  model.variables().prepare_to_read();
  save_weights(*model.primary(), out);
  if (checkpoint_path) checkpoint.write(checkpoint_path);
  coordinator.shutdown();
  std::cout << "trained " << steps << " steps" << std::endl;
  return 0;
}

// Each step on a worker prints "step K received R sent S": the bytes it moved to and from
// the ps tasks, which the test checks against the rows the batch names.
int train_embedding(int64_t rows, int64_t dim, int steps, const std::string& out) {
  dist::ParameterServerStrategy strategy(options_from_env());
  torch::manual_seed(7);
  auto model = strategy.mirror(dist::testing::EmbeddingNet(rows, dim));
  const char* kind = std::getenv("DIST_TEST_OPTIMIZER");
  auto optimizer = dist::testing::make_embedding_optimizer(strategy, model, kind ? kind : "sgd");
  const int64_t id_limit = env_int("DIST_TEST_ID_LIMIT", 0);
  dist::ClusterCoordinator coordinator(strategy);
  int step = 0;
  coordinator.register_function("train_step", [&](dist::ScheduledCall& call) {
    const dist::data::Element batch = call.next();
    const int64_t received = strategy.bytes_received(), sent = strategy.bytes_sent();
    const at::Tensor loss = train_on(strategy, model, *optimizer, batch);
    std::cout << "step " << step++ << " received " << strategy.bytes_received() - received
              << " sent " << strategy.bytes_sent() - sent << std::endl;
    return loss;
  });
  auto dataset = coordinator.create_per_worker_dataset([&](const dist::InputContext&) {
    return dist::testing::embedding_data(rows, steps, id_limit);
  });
  if (!strategy.is_chief()) return coordinator.serve();
  for (int i = 0; i < steps; ++i) {
    coordinator.schedule("train_step", dataset.iterator());
    coordinator.join();  // synchronous: the one-device order of updates
  }
  if (out != "-") {
    model.variables().prepare_to_read();
    save_weights(*model.primary(), out);
  }
  if (const char* checkpoint = std::getenv("DIST_TEST_CHECKPOINT"))
    dist::Checkpoint(model, optimizer.get()).write(checkpoint);
  coordinator.shutdown();
  std::cout << "trained " << steps << " steps" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "train" && argc == 5) return train(argv[2], std::atoi(argv[3]), argv[4]);
    if (scenario == "embedding" && argc == 6)
      return train_embedding(std::atoll(argv[2]), std::atoll(argv[3]), std::atoi(argv[4]), argv[5]);
    std::cerr << "usage: dist_test_ps_task train sgd|adam STEPS OUT\n"
              << "       dist_test_ps_task embedding ROWS DIM STEPS OUT" << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
