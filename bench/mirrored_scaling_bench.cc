// Scaling of MirroredStrategy, 64 examples per replica, Adam, against a plain LibTorch loop:
//   plain1x2: no strategy at all, 2 intra-op threads (what a LibTorch user writes by hand)
//   1x1: 1 replica with 1 intra-op thread
//   1x2: 1 replica with 2 intra-op threads
//   2x1: 2 replicas with 1 thread each (global batch 128)
//   2x1-step0: 2x1 with the optimizer step left to replica 0 (shard_optimizer_step = false),
//              the layout before the replicas split the step; not in "all"
// Variants run in interleaved rounds; each round times `steps` training steps. Prints the
// median images/s of each, the scaling efficiency images/s(2x1) / (2 * images/s(1x1)), and
// the one-replica path against plain LibTorch.
//
//   ./build/bench/mirrored_scaling_bench [rounds=9] [steps=30]
//                                        [only=all|plain1x2|1x1|1x2|2x1|2x1-step0|2x1,2x1-step0]
//                                        [model=cnn|mlp] [precision=float32|bf16]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "dist/train/mixed_precision.h"
#include "interleaved_timer.h"

namespace {

using dist::mixed_precision::Policy;

struct Config {
  const char* name;
  int replicas;  // 0: plain LibTorch, no strategy
  int threads;
  bool shard_optimizer_step = true;
  bool in_all = true;
};

// Fashion-MNIST-shaped inputs; the MLP flattens them itself.
at::Tensor random_images(int64_t n) { return torch::rand({n, 1, 28, 28}); }

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual void step() = 0;
  virtual int64_t images_per_step() const = 0;
};

// One strategy, model, optimizer and fixed batch; step() runs one training step.
class StrategyTrainer final : public Trainer {
 public:
  StrategyTrainer(const Config& config, const std::string& model_name, Policy policy)
      : config_(config), policy_(policy) {
    dist::MirroredOptions options;
    for (int r = 0; r < config.replicas; ++r) options.devices.push_back("cpu:" + std::to_string(r));
    options.threads_per_replica = config.threads;
    options.shard_optimizer_step = config.shard_optimizer_step;
    strategy_ = std::make_unique<dist::MirroredStrategy>(options);
    torch::manual_seed(0);
    model_ = std::make_unique<dist::Mirrored<torch::nn::Sequential>>(
        strategy_->mirror(dist::models::make_model(model_name)));
    optimizer_ =
        strategy_->mirror_optimizer<torch::optim::Adam>(*model_, torch::optim::AdamOptions(1e-3));
    const int64_t global = 64 * config.replicas;
    auto x = random_images(global);
    auto y = torch::randint(0, 10, {global});
    batch_ = strategy_
                 ->experimental_distribute_dataset(
                     dist::data::Dataset::from_tensor_slices({x, y}).batch(global))
                 .iterator()
                 .next()
                 .value();
  }

  void step() override {
    auto& model = *model_;
    auto losses = strategy_->run(
        [&](const dist::data::Element& b) {
          auto logits = dist::mixed_precision::forward_in_policy(
              [&] { return model->forward(b[0]); }, policy_);
          auto loss = dist::compute_average_loss(loss_fn_(b[1], logits));
          loss.backward();
          optimizer_->apply_gradients();
          return loss.detach();
        },
        batch_);
    strategy_->reduce(dist::ReduceOp::kSum, losses);
  }

  int64_t images_per_step() const override { return 64 * config_.replicas; }

 private:
  Config config_;
  Policy policy_;
  std::unique_ptr<dist::MirroredStrategy> strategy_;
  std::unique_ptr<dist::Mirrored<torch::nn::Sequential>> model_;
  std::shared_ptr<dist::MirroredOptimizer> optimizer_;
  dist::SparseCategoricalCrossentropy loss_fn_{true, dist::Reduction::kNone};
  dist::PerReplica<dist::data::Element> batch_;
};

// The same step written with LibTorch alone: the floor the one-replica path is held to.
class PlainTrainer final : public Trainer {
 public:
  PlainTrainer(const Config& config, const std::string& model_name, Policy policy)
      : threads_(config.threads), policy_(policy) {
    torch::manual_seed(0);
    model_ = dist::models::make_model(model_name);
    optimizer_ =
        std::make_unique<torch::optim::Adam>(model_->parameters(), torch::optim::AdamOptions(1e-3));
    x_ = random_images(64);
    y_ = torch::randint(0, 10, {64});
  }

  void step() override {
    // The strategies set their replica threads' counts; this loop runs on the main thread and
    // sets its own, only when it differs (at::set_num_threads rebuilds the thread pool).
    if (at::get_num_threads() != threads_) at::set_num_threads(threads_);
    optimizer_->zero_grad();
    auto logits =
        dist::mixed_precision::forward_in_policy([&] { return model_->forward(x_); }, policy_);
    namespace F = torch::nn::functional;
    auto loss =
        F::cross_entropy(logits, y_, F::CrossEntropyFuncOptions().reduction(torch::kSum)) / 64.0;
    loss.backward();
    optimizer_->step();
  }

  int64_t images_per_step() const override { return 64; }

 private:
  int threads_;
  Policy policy_;
  torch::nn::Sequential model_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  at::Tensor x_, y_;
};

// The comparisons between the configurations' images/s (0: not run), in the order of main's
// table: plain1x2, 1x1, 1x2, 2x1, 2x1-step0.
void print_ratios(const double (&ips)[5]) {
  if (ips[1] > 0 && ips[3] > 0)
    std::printf("scaling efficiency 2x1 / (2 * 1x1): %.1f%%\n", 100.0 * ips[3] / (2 * ips[1]));
  if (ips[2] > 0 && ips[3] > 0)
    std::printf("2 replicas vs 1 replica of 2 threads: %.3fx\n", ips[3] / ips[2]);
  if (ips[3] > 0 && ips[4] > 0)
    std::printf("2x1 splitting the optimizer step vs replica 0 stepping alone: %.3fx\n",
                ips[3] / ips[4]);
  if (ips[0] > 0 && ips[2] > 0)
    std::printf("1 replica of 2 threads vs plain LibTorch with 2 threads: %.3fx\n",
                ips[2] / ips[0]);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const char* only = argc > 3 ? argv[3] : "all";
  const std::string model_name = argc > 4 ? argv[4] : "cnn";
  const Policy policy = dist::mixed_precision::policy_from_name(argc > 5 ? argv[5] : "float32");
  const Config configs[] = {{"plain1x2", 0, 2},
                            {"1x1", 1, 1},
                            {"1x2", 1, 2},
                            {"2x1", 2, 1},
                            {"2x1-step0", 2, 1, false, false}};
  // `only`: one name, or several separated by commas.
  auto chosen = [&](const Config& c) {
    if (std::strcmp(only, "all") == 0) return c.in_all;
    const std::string list = std::string(",") + only + ",";
    return list.find(std::string(",") + c.name + ",") != std::string::npos;
  };

  std::vector<std::unique_ptr<Trainer>> trainers;
  std::vector<dist::bench::Variant> variants;
  std::vector<const Config*> used;
  for (const auto& c : configs) {
    if (!chosen(c)) continue;
    if (c.replicas == 0)
      trainers.push_back(std::make_unique<PlainTrainer>(c, model_name, policy));
    else
      trainers.push_back(std::make_unique<StrategyTrainer>(c, model_name, policy));
    Trainer* t = trainers.back().get();
    variants.push_back({c.name, [t] { t->step(); }});
    used.push_back(&c);
  }
  if (variants.empty()) {
    std::fprintf(stderr,
                 "unknown configuration '%s': use all, plain1x2, 1x1, 1x2, 2x1 or 2x1-step0\n",
                 only);
    return 2;
  }
  auto medians = dist::bench::interleaved_medians(variants, rounds, steps);
  double ips[5] = {0, 0, 0, 0, 0};
  for (size_t i = 0; i < variants.size(); ++i) {
    const double images_per_sec = trainers[i]->images_per_step() / medians[i];
    std::printf(
        "%s (replicas x threads) %s %s: %.3f ms/step, %.0f images/s (median of %d rounds x %d "
        "steps)\n",
        used[i]->name, model_name.c_str(), dist::mixed_precision::policy_name(policy).c_str(),
        medians[i] * 1e3, images_per_sec, rounds, steps);
    for (int k = 0; k < 5; ++k)
      if (used[i] == &configs[k]) ips[k] = images_per_sec;
  }
  print_ratios(ips);
  return 0;
}
