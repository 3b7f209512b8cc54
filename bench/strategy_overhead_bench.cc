// Cost of the strategy layer on one device: the tutorial CNN's training step (batch 64,
// Adam) in plain LibTorch against the same step through OneDeviceStrategy (run,
// compute_average_loss, apply_gradients, reduce). Prints medians and their ratio.
//
//   ./build/bench/strategy_overhead_bench [rounds=15] [steps_per_round=20]
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "interleaved_timer.h"

namespace {

// A plain LibTorch training step of the tutorial CNN on (x, y): cross_entropy, Adam.
std::function<void()> plain_step_of(const at::Tensor& x, const at::Tensor& y) {
  auto model = dist::models::make_tutorial_cnn();
  auto optimizer =
      std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  return [model, optimizer, x, y]() mutable {
    optimizer->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer->step();
  };
}

// The same plain loop with the library's loss (per-example loss, sum / global batch): the
// difference to the strategy variant is the strategy layer alone.
std::function<void()> plain_dist_loss_step_of(const at::Tensor& x, const at::Tensor& y) {
  auto model = dist::models::make_tutorial_cnn();
  auto optimizer =
      std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  return [model, optimizer, loss_fn, x, y]() mutable {
    optimizer->zero_grad();
    auto loss = dist::compute_average_loss(loss_fn(y, model->forward(x)), 64);
    loss.backward();
    optimizer->step();
  };
}

// The medians of plain, plain_dist_loss and one_device, and their ratios.
void print_medians(const std::vector<double>& medians, int rounds, int steps) {
  std::printf("threads=%d rounds=%d steps_per_round=%d\n", torch::get_num_threads(), rounds, steps);
  std::printf("plain libtorch step (cross_entropy):        %.3f ms (median)\n", medians[0] * 1e3);
  std::printf("plain libtorch step (dist loss):            %.3f ms (median)\n", medians[1] * 1e3);
  std::printf("OneDeviceStrategy step:                     %.3f ms (median)\n", medians[2] * 1e3);
  std::printf("strategy layer: strategy / plain(dist loss) = %.4f (%+.2f%%)\n",
              medians[2] / medians[1], (medians[2] / medians[1] - 1) * 100);
  std::printf("whole library:  strategy / plain(cross_entropy) = %.4f (%+.2f%%)\n",
              medians[2] / medians[0], (medians[2] / medians[0] - 1) * 100);
}

}  // namespace

int main(int argc, char** argv) {
  const bool only = argc > 1 && std::string(argv[1]) == "only";
  int rounds = argc > 1 && !only ? std::atoi(argv[1]) : 15;
  int steps = argc > 2 && !only ? std::atoi(argv[2]) : 20;
  torch::manual_seed(0);
  auto x = torch::rand({64, 1, 28, 28});
  auto y = torch::randint(0, 10, {64});

  // LibTorch defaults to 1 intra-op thread on this machine (its core detection sees 1);
  // use every core, as dist-train does.
  torch::set_num_threads(std::max(1u, std::thread::hardware_concurrency()));

  const std::function<void()> plain_step = plain_step_of(x, y);
  const std::function<void()> plain_dist_loss_step = plain_dist_loss_step_of(x, y);

  dist::OneDeviceStrategy strategy;
  auto model = strategy.mirror(dist::models::make_tutorial_cnn());
  auto opt = strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  dist::SparseCategoricalCrossentropy loss_fn(true, dist::Reduction::kNone);
  auto batch = strategy
                   .experimental_distribute_dataset(
                       dist::data::Dataset::from_tensor_slices({x, y}).batch(64))
                   .iterator()
                   .next()
                   .value();
  auto strategy_step = [&] {
    auto losses = strategy.run(
        [&](const dist::data::Element& b) {
          auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          opt->apply_gradients();
          return loss.detach();
        },
        batch);
    strategy.reduce(dist::ReduceOp::kSum, losses);
  };

  // "only VARIANT STEPS": run one variant alone, for instruction counts under
  //   valgrind --tool=callgrind ./strategy_overhead_bench only one_device 5
  if (argc > 3 && std::string(argv[1]) == "only") {
    const std::string variant = argv[2];
    const int n = std::atoi(argv[3]);
    std::function<void()> chosen = strategy_step;
    if (variant == "plain") chosen = plain_step;
    if (variant == "plain_dist_loss") chosen = plain_dist_loss_step;
    for (int i = 0; i < n; ++i) chosen();
    return 0;
  }

  auto medians = dist::bench::interleaved_medians({{"plain", plain_step},
                                                   {"plain_dist_loss", plain_dist_loss_step},
                                                   {"one_device", strategy_step}},
                                                  rounds, steps);
  print_medians(medians, rounds, steps);
  return 0;
}
