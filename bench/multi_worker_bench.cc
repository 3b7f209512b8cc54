// Training-step throughput of MultiWorkerMirroredStrategy or MirroredStrategy on synthetic
// data (64 examples per replica, Adam), for comparing process layouts and against PyTorch DDP.
// Multi-worker: start it under dist-launch; the chief prints the result.
//
//   dist-launch --workers 2 -- build/bench/multi_worker_bench multi_worker cnn [steps=40]
//   (multi_worker_after_backward: the same without overlapping the all-reduce with backward;
//    multi_worker_tcp: collectives over Gloo/TCP even on one host, not shared memory;
//    multi_worker_private: each worker keeps its own copy of the variables and steps it whole)
//   build/bench/multi_worker_bench mirrored cnn [steps=40]        (2 replicas in one process)
//
// fashion_mnist: MultiWorkerMirroredStrategy (one replica and one thread per worker, as
// multi_worker above) training on real Fashion-MNIST with SGD for some epochs; the chief
// prints one JSON line with images/s of the training loop and the test accuracy (for
// bench/compare_parameter_server.sh, against ps_bench):
//   dist-launch --workers 2 -- build/bench/multi_worker_bench fashion_mnist cnn|mlp|embedding
//       [--epochs 3] [--batch 64 (per worker)] [--steps-per-epoch 0 (full)] [--lr 0.05]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "fashion_mnist_bench.h"

namespace {

// The chief's JSON line of a Fashion-MNIST run.
void print_result(const dist::MultiWorkerMirroredStrategy& strategy, torch::nn::Sequential primary,
                  const dist::bench::TrainFlags& flags, int64_t steps, int64_t images,
                  double seconds) {
  dist::bench::TrainResult result;
  result.strategy = "multi_worker_mirrored";
  result.workers = strategy.num_workers();
  result.flags = flags;
  result.steps = steps;
  result.images = images;
  result.seconds = seconds;
  result.test_accuracy = dist::bench::fashion_mnist_test_accuracy(primary);
  // Every step all-reduces every parameter's whole gradient: a ring all-reduce over N workers
  // sends and receives 2 (N - 1) / N of it per worker (on one host this job's collectives go
  // through shared memory; the figure is what a job across hosts moves).
  double gradient_bytes = 0;
  for (const auto& p : primary->parameters())
    gradient_bytes += static_cast<double>(p.numel() * p.element_size());
  const double workers = strategy.num_workers();
  result.bytes_out_per_step = result.bytes_in_per_step =
      2 * (workers - 1) / workers * gradient_bytes;
  dist::bench::print_json(result);
}

// The training set shuffled (seed 1) in global batches of batch x workers, split between the
// workers (each runs the pipeline and takes its share); one JSON line from the chief.
int train_fashion_mnist(const std::string& model_name, dist::bench::TrainFlags flags) {
  flags.model = model_name;
  dist::MultiWorkerOptions options;
  options.threads_per_replica = 1;
  dist::MultiWorkerMirroredStrategy strategy(options);
  torch::manual_seed(0);
  auto model = strategy.mirror(dist::bench::make_bench_model(model_name));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(flags.lr));
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  auto input =
      dist::data::fashion_mnist(dist::data::kFashionMnistDefaultDir, dist::data::Split::kTrain)
          .shuffle(dist::bench::kFashionMnistTrainExamples, 1)
          .batch(flags.batch * strategy.num_replicas_in_sync());
  if (flags.steps_per_epoch > 0) input = input.take(flags.steps_per_epoch);
  auto data = strategy.experimental_distribute_dataset(input);
  int64_t steps = 0, images = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    double total = 0;
    int64_t epoch_steps = 0;
    for (const auto& batch : data.iterator(epoch)) {
      auto losses = strategy.run(
          [&](const dist::data::Element& b) {
            auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
            loss.backward();
            optimizer->apply_gradients();
            return loss.detach();
          },
          batch);
      total += strategy.reduce(dist::ReduceOp::kSum, losses).item<double>();
      images += batch.global_batch_size();
      ++epoch_steps;
    }
    steps += epoch_steps;
    if (strategy.is_chief())
      std::fprintf(stderr, "multi_worker_bench: epoch %d: mean loss %.4f, %.1f s\n", epoch + 1,
                   total / static_cast<double>(epoch_steps),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!strategy.is_chief()) return 0;
  print_result(strategy, model.primary(), flags, steps, images, seconds);
  return 0;
}

// The strategy of a synthetic-data layout; `chief` says whether this process prints.
std::unique_ptr<dist::Strategy> make_layout(const std::string& layout, bool& chief) {
  if (layout == "multi_worker" || layout == "multi_worker_after_backward" ||
      layout == "multi_worker_unchecked" || layout == "multi_worker_tcp" ||
      layout == "multi_worker_private") {
    dist::MultiWorkerOptions options;
    options.threads_per_replica = 1;
    options.communication.overlap_with_backward = layout != "multi_worker_after_backward";
    // Without the agreement before each collective: what the check costs.
    options.communication.check_collectives = layout != "multi_worker_unchecked";
    options.communication.share_variables_on_host = layout != "multi_worker_private";
    if (layout == "multi_worker_tcp")
      options.communication.implementation = dist::CommunicationOptions::Implementation::kRing;
    auto mw = std::make_unique<dist::MultiWorkerMirroredStrategy>(options);
    chief = mw->is_chief();
    return mw;
  } else {
    dist::MirroredOptions options;
    options.devices = {"cpu:0", "cpu:1"};
    options.threads_per_replica = 1;
    return std::make_unique<dist::MirroredStrategy>(options);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: multi_worker_bench multi_worker|multi_worker_after_backward|"
        "multi_worker_unchecked|multi_worker_tcp|multi_worker_private|mirrored "
        "cnn|mlp [steps]\n"
        "       multi_worker_bench fashion_mnist cnn|mlp|embedding [--epochs N] [--batch N] "
        "[--steps-per-epoch N] [--lr X]\n");
    return 2;
  }
  const std::string layout = argv[1], model_name = argv[2];
  if (layout == "fashion_mnist") {
    try {
      return train_fashion_mnist(model_name, dist::bench::parse_train_flags(argc, argv, 3));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "multi_worker_bench: %s\n", e.what());
      return 1;
    }
  }
  const int steps = argc > 3 ? std::atoi(argv[3]) : 40;
  bool chief = true;
  std::unique_ptr<dist::Strategy> strategy = make_layout(layout, chief);
  torch::manual_seed(0);
  auto model = strategy->mirror(dist::models::make_model(model_name));
  auto optimizer =
      strategy->mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  const int64_t global = 64 * strategy->num_replicas_in_sync();
  auto data = strategy->experimental_distribute_dataset(
      dist::data::Dataset::from_tensor_slices(
          {torch::rand({global, 1, 28, 28}), torch::randint(0, 10, {global})})
          .batch(global)
          .repeat());
  auto it = data.iterator();
  auto step = [&] {
    auto batch = it.next().value();
    strategy->run(
        [&](const dist::data::Element& b) {
          auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          optimizer->apply_gradients();
        },
        batch);
  };
  for (int i = 0; i < 5; ++i) step();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (chief)
    std::printf("%s %s %d replicas: %.2f ms/step, %.0f images/s\n", layout.c_str(),
                model_name.c_str(), strategy->num_replicas_in_sync(), seconds / steps * 1e3,
                global * steps / seconds);
  return 0;
}
