// ParameterServerStrategy on real Fashion-MNIST: the tutorial CNN trained asynchronously by
// the workers through the ps tasks, SGD applied on the ps. The chief prints one JSON line:
// images/s of the training loop and the test accuracy after training (read back from the ps
// tasks, evaluated on the chief). bench/compare_parameter_server.sh runs it against
// MultiWorkerMirroredStrategy (multi_worker_bench fashion_mnist).
//
// The same binary runs as every task of the job; TF_CONFIG names the task, and ps and worker
// tasks serve until the chief is done:
//   TF_CONFIG=... build/bench/ps_bench [--epochs 3] [--batch 64] [--steps-per-epoch 0] [--lr 0.05]
//                                      [--model cnn|embedding]
// (embedding: hashed_patch_model.h, a 1,000,000 x 64 ShardedEmbedding whose rows a step looks
// up and updates sparsely; the JSON line then also says how many bytes a worker's step moved.)
//
// A scheduled step is one worker's batch (--batch examples), so a full epoch is
// 60000 / batch steps (937 for 64: each of 2 workers takes about 60000 / (2 * 64) of them, as
// fast as it goes); the chief schedules an epoch's steps, then joins. Each worker reads its own
// shuffle of the training set (seed 1 + its index), repeated, from a fresh iterator per epoch.
// The clock starts once every worker has answered a call, so start-up is not counted (as
// multi_worker_bench's rendezvous happens before its clock). Every task computes on one
// thread, as multi_worker_bench's workers do.
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "dist/data/mnist.h"
#include "dist/distribute/cluster_coordinator.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "fashion_mnist_bench.h"

namespace {

using Clock = std::chrono::steady_clock;

// Schedules short calls until every worker has answered one (at most about a minute).
void wait_for_workers(dist::ClusterCoordinator& coordinator, int workers) {
  std::set<int64_t> seen;
  for (int round = 0; round < 300 && static_cast<int>(seen.size()) < workers; ++round) {
    std::vector<dist::RemoteValue> answers;
    for (int i = 0; i < workers; ++i) answers.push_back(coordinator.schedule("worker_index"));
    coordinator.join();
    for (const auto& answer : answers) seen.insert(answer.fetch().item<int64_t>());
  }
  if (static_cast<int>(seen.size()) < workers)
    std::fprintf(stderr, "ps_bench: only %zu of %d workers answered before the clock started\n",
                 seen.size(), workers);
}

// The chief's timed loop: the training time and the bytes the workers' steps moved.
struct Timed {
  double seconds = 0, bytes_out = 0, bytes_in = 0;
};

// `flags.epochs` epochs of `steps` scheduled steps, joined at each epoch's end.
Timed train_epochs(dist::ClusterCoordinator& coordinator, const dist::PerWorkerDataset& dataset,
                   const dist::bench::TrainFlags& flags, int64_t steps) {
  const auto start = Clock::now();
  Timed timed;
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto iterator = dataset.iterator(epoch);
    std::vector<dist::RemoteValue> losses;
    for (int64_t i = 0; i < steps; ++i)
      losses.push_back(coordinator.schedule("train_step", iterator));
    coordinator.join();
    double total = 0;
    for (const auto& step : losses) {
      const auto values = step.fetch_dict();
      total += values.at("loss").item<double>();
      timed.bytes_out += values.at("sent").item<double>();
      timed.bytes_in += values.at("received").item<double>();
    }
    std::fprintf(stderr, "ps_bench: epoch %d: mean loss %.4f, %.1f s\n", epoch + 1,
                 total / static_cast<double>(steps),
                 std::chrono::duration<double>(Clock::now() - start).count());
  }
  timed.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return timed;
}

// The chief's JSON line.
void print_result(const dist::bench::TrainFlags& flags, int workers, int64_t steps,
                  const Timed& timed, double test_accuracy) {
  dist::bench::TrainResult result;
  result.strategy = "parameter_server";
  result.workers = workers;
  result.flags = flags;
  result.steps = steps * flags.epochs;
  result.images = result.steps * flags.batch;
  result.seconds = timed.seconds;
  result.test_accuracy = test_accuracy;
  result.bytes_out_per_step = timed.bytes_out / static_cast<double>(result.steps);
  result.bytes_in_per_step = timed.bytes_in / static_cast<double>(result.steps);
  dist::bench::print_json(result);
}

int run(const dist::bench::TrainFlags& flags) {
  at::set_num_threads(1);  // the process-wide count each thread (gRPC's too) starts from
  dist::ParameterServerOptions options;
  options.cluster = dist::cluster_config_from_environment();
  const int workers = options.cluster->cluster.num_tasks("worker");
  dist::ParameterServerStrategy strategy(options);
  torch::manual_seed(0);
  auto model = strategy.mirror(dist::bench::make_bench_model(flags.model));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(flags.lr));
  dist::ClusterCoordinator coordinator(strategy);
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  coordinator.register_function("train_step", [&](dist::ScheduledCall& call) {
    const auto batch = call.next();
    const int64_t sent = strategy.bytes_sent(), received = strategy.bytes_received();
    auto losses = strategy.run(
        [&](const dist::data::Element& b) {
          auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          optimizer->apply_gradients();  // sent to the ps tasks, which apply SGD
          return loss.detach();
        },
        batch);
    return std::map<std::string, at::Tensor>{
        {"loss", strategy.reduce(dist::ReduceOp::kSum, losses)},
        {"sent", torch::tensor(strategy.bytes_sent() - sent)},
        {"received", torch::tensor(strategy.bytes_received() - received)}};
  });
  coordinator.register_function("worker_index", [](dist::ScheduledCall& call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // so each worker gets one
    return torch::tensor(static_cast<int64_t>(call.worker_index()));
  });
  // Workers load the training set before serving, outside the timed loop.
  std::optional<dist::data::Dataset> train;
  if (strategy.task_type() == "worker")
    train =
        dist::data::fashion_mnist(dist::data::kFashionMnistDefaultDir, dist::data::Split::kTrain);
  auto dataset = coordinator.create_per_worker_dataset([&](const dist::InputContext& context) {
    return train->shuffle(dist::bench::kFashionMnistTrainExamples, 1 + context.input_pipeline_id)
        .repeat()
        .batch(flags.batch);
  });
  if (!strategy.is_chief()) return coordinator.serve();

  const int64_t steps = flags.steps_per_epoch > 0
                            ? flags.steps_per_epoch
                            : dist::bench::kFashionMnistTrainExamples / flags.batch;
  wait_for_workers(coordinator, workers);
  const Timed timed = train_epochs(coordinator, dataset, flags, steps);
  model.variables().prepare_to_read();  // the ps tasks' values into the chief's module
  coordinator.shutdown();

  print_result(flags, workers, steps, timed,
               dist::bench::fashion_mnist_test_accuracy(model.primary()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(dist::bench::parse_train_flags(argc, argv, 1));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_bench: %s\n", e.what());
    return 1;
  }
}
