// Scaling of MirroredStrategy on the tutorial CNN, 64 examples per replica, Adam:
//   1x1: 1 replica with 1 intra-op thread
//   1x2: 1 replica with 2 intra-op threads
//   2x1: 2 replicas with 1 thread each (global batch 128)
// Variants run in interleaved rounds; each round times `steps` training steps. Prints the
// median images/s of each and the scaling efficiency images/s(2x1) / (2 * images/s(1x1)).
//
//   ./build/bench/mirrored_scaling_bench [rounds=9] [steps=30] [only=all|1x1|1x2|2x1]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "interleaved_timer.h"

namespace {

struct Config {
  const char* name;
  int replicas;
  int threads;
};

// One strategy, model, optimizer and fixed batch; step() runs one training step.
class Trainer {
 public:
  explicit Trainer(const Config& config) : config_(config) {
    dist::MirroredOptions options;
    for (int r = 0; r < config.replicas; ++r) options.devices.push_back("cpu:" + std::to_string(r));
    options.threads_per_replica = config.threads;
    strategy_ = std::make_unique<dist::MirroredStrategy>(options);
    torch::manual_seed(0);
    model_ = std::make_unique<dist::Mirrored<torch::nn::Sequential>>(
        strategy_->mirror(dist::models::make_tutorial_cnn()));
    optimizer_ =
        strategy_->mirror_optimizer<torch::optim::Adam>(*model_, torch::optim::AdamOptions(1e-3));
    const int64_t global = 64 * config.replicas;
    auto x = torch::rand({global, 1, 28, 28});
    auto y = torch::randint(0, 10, {global});
    batch_ = strategy_
                 ->experimental_distribute_dataset(
                     dist::data::Dataset::from_tensor_slices({x, y}).batch(global))
                 .iterator()
                 .next()
                 .value();
  }

  void step() {
    auto& model = *model_;
    auto losses = strategy_->run(
        [&](const dist::data::Element& b) {
          auto loss = dist::compute_average_loss(loss_fn_(b[1], model->forward(b[0])));
          loss.backward();
          optimizer_->apply_gradients();
          return loss.detach();
        },
        batch_);
    strategy_->reduce(dist::ReduceOp::kSum, losses);
  }

  int64_t images_per_step() const { return 64 * config_.replicas; }

 private:
  Config config_;
  std::unique_ptr<dist::MirroredStrategy> strategy_;
  std::unique_ptr<dist::Mirrored<torch::nn::Sequential>> model_;
  std::shared_ptr<dist::MirroredOptimizer> optimizer_;
  dist::SparseCategoricalCrossentropy loss_fn_{true, dist::Reduction::kNone};
  dist::PerReplica<dist::data::Element> batch_;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const char* only = argc > 3 ? argv[3] : "all";
  const Config configs[] = {{"1x1", 1, 1}, {"1x2", 1, 2}, {"2x1", 2, 1}};

  std::vector<std::unique_ptr<Trainer>> trainers;
  std::vector<dist::bench::Variant> variants;
  std::vector<const Config*> used;
  for (const auto& c : configs) {
    if (std::strcmp(only, "all") != 0 && std::strcmp(only, c.name) != 0) continue;
    trainers.push_back(std::make_unique<Trainer>(c));
    Trainer* t = trainers.back().get();
    variants.push_back({c.name, [t] { t->step(); }});
    used.push_back(&c);
  }
  if (variants.empty()) {
    std::fprintf(stderr, "unknown configuration '%s': use all, 1x1, 1x2 or 2x1\n", only);
    return 2;
  }
  auto medians = dist::bench::interleaved_medians(variants, rounds, steps);
  double ips[3] = {0, 0, 0};
  for (size_t i = 0; i < variants.size(); ++i) {
    const double images_per_sec = trainers[i]->images_per_step() / medians[i];
    std::printf(
        "%s (replicas x threads): %.3f ms/step, %.0f images/s (median of %d rounds x %d steps)\n",
        used[i]->name, medians[i] * 1e3, images_per_sec, rounds, steps);
    for (int k = 0; k < 3; ++k)
      if (used[i] == &configs[k]) ips[k] = images_per_sec;
  }
  if (ips[0] > 0 && ips[2] > 0)
    std::printf("scaling efficiency 2x1 / (2 * 1x1): %.1f%%\n", 100.0 * ips[2] / (2 * ips[0]));
  if (ips[1] > 0 && ips[2] > 0)
    std::printf("2 replicas vs 1 replica of 2 threads: %.3fx\n", ips[2] / ips[1]);
  return 0;
}
