// One task of a ParameterServerStrategy job for the tests in ps_job_test.cc: the same binary
// runs as chief, worker and ps, as a user's would. Reads TF_CONFIG; exits 0 on success.
//
//   dist_test_ps_task train sgd|adam STEPS OUT   STEPS steps of the equivalence data's batches
//                                                (the tutorial CNN, seed 7, as the one-device
//                                                reference in equivalence_data.h); the chief
//                                                schedules each and, with DIST_TEST_SYNC=1,
//                                                joins after each; it saves the final weights
//                                                (read from the ps tasks) to OUT.
//
// With DIST_TEST_CHECKPOINT=PATH the chief restores PATH before the first step if it exists,
// and writes it after the last (the existing checkpoint format).
//
// Environment: DIST_TEST_TIMEOUT_MS (rpc and coordinator timeouts), DIST_TEST_PS_SHARDS (a
// fixed-shards partitioner), DIST_TEST_STEP_SLEEP_MS (each step sleeps this long first, so a
// test can kill a worker in the middle of one).
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
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

int train(const std::string& optimizer_kind, int steps, const std::string& out) {
  dist::ParameterServerStrategy strategy(options_from_env());
  torch::manual_seed(7);
  auto model = strategy.mirror(dist::models::make_tutorial_cnn());
  auto optimizer =
      optimizer_kind == "adam"
          ? strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3))
          : strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  dist::ClusterCoordinator coordinator(strategy);
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  const auto sleep = std::chrono::milliseconds(env_int("DIST_TEST_STEP_SLEEP_MS", 0));
  coordinator.register_function("train_step", [&](dist::ScheduledCall& call) {
    const dist::data::Element batch = call.next();
    std::this_thread::sleep_for(sleep);
    auto losses = strategy.run(
        [&](const dist::data::Element& b) {
          auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          optimizer->apply_gradients();
          return loss.detach();
        },
        batch);
    std::cout << "step done on worker:" << call.worker_index() << std::endl;
    return strategy.reduce(dist::ReduceOp::kSum, losses);
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
  std::vector<dist::RemoteValue> losses;
  for (int i = 0; i < steps; ++i) {
    losses.push_back(coordinator.schedule("train_step", dataset.iterator()));
    if (sync) coordinator.join();
  }
  coordinator.join();
  for (size_t i = 0; i < losses.size(); ++i)
    std::cout << "loss " << i << " " << losses[i].fetch().item<double>() << std::endl;
  model.variables().prepare_to_read();
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& p : model.primary()->named_parameters())
    weights.emplace_back(p.key(), p.value().detach().clone());
  dist::save_safetensors(out, weights);
  if (checkpoint_path) checkpoint.write(checkpoint_path);
  coordinator.shutdown();
  std::cout << "trained " << steps << " steps" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    if (scenario == "train" && argc == 5) return train(argv[2], std::atoi(argv[3]), argv[4]);
    std::cerr << "usage: dist_test_ps_task train sgd|adam STEPS OUT" << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
