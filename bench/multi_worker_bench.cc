// Training-step throughput of MultiWorkerMirroredStrategy or MirroredStrategy on synthetic
// data (64 examples per replica, Adam), for comparing process layouts and against PyTorch DDP.
// Multi-worker: start it under dist-launch; the chief prints the result.
//
//   dist-launch --workers 2 -- build/bench/multi_worker_bench multi_worker cnn [steps=40]
//   (multi_worker_after_backward: the same without overlapping the all-reduce with backward;
//    multi_worker_tcp: collectives over Gloo/TCP even on one host, not shared memory;
//    multi_worker_private: each worker keeps its own copy of the variables and steps it whole)
//   build/bench/multi_worker_bench mirrored cnn [steps=40]        (2 replicas in one process)
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

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: multi_worker_bench multi_worker|multi_worker_after_backward|"
                 "multi_worker_unchecked|multi_worker_tcp|multi_worker_private|mirrored "
                 "cnn|mlp [steps]\n");
    return 2;
  }
  const std::string layout = argv[1], model_name = argv[2];
  const int steps = argc > 3 ? std::atoi(argv[3]) : 40;
  std::unique_ptr<dist::Strategy> strategy;
  bool chief = true;
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
    strategy = std::move(mw);
  } else {
    dist::MirroredOptions options;
    options.devices = {"cpu:0", "cpu:1"};
    options.threads_per_replica = 1;
    strategy = std::make_unique<dist::MirroredStrategy>(options);
  }
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
