#include "equivalence_data.h"

#include <torch/torch.h>

#include "dist/distribute/local_cluster.h"
#include "dist/distribute/replica_context.h"
#include "dist/distribute/sync_batch_norm.h"
#include "dist/models/cyclegan.h"
#include "dist/models/reference_models.h"
#include "dist/train/checkpoint.h"
#include "dist/train/loss.h"

namespace dist::testing {

data::Dataset equivalence_data() {
  torch::manual_seed(123);
  auto x = torch::rand({193, 1, 28, 28});
  auto y = torch::randint(0, 10, {193});
  return data::Dataset::from_tensor_slices({x, y}).batch(10);
}

torch::nn::Sequential make_equivalence_mlp() {
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 200), torch::nn::ReLU(),
                               torch::nn::Linear(200, 10));
}

std::vector<std::pair<std::string, torch::Tensor>> train_one_pass(
    const Strategy& strategy, const Mirrored<torch::nn::Sequential>& model,
    MirroredOptimizer& optimizer, const std::function<void(const torch::Tensor&)>& after_backward) {
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  for (const auto& batch :
       strategy.experimental_distribute_dataset(equivalence_data()).iterator()) {
    strategy.run(
        [&](const data::Element& b) {
          auto loss = compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          if (after_backward) after_backward(loss);
          optimizer.apply_gradients();
        },
        batch);
  }
  model.variables().gather_values();  // every worker: sharded parameters are in chunks
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& p : model.primary()->named_parameters())
    weights.emplace_back(p.key(), p.value().detach().clone());
  return weights;
}

std::vector<std::pair<std::string, torch::Tensor>> train_equivalence_steps(
    const Strategy& strategy, bool adam,
    const std::function<void(const torch::Tensor&)>& after_backward) {
  torch::manual_seed(7);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto optimizer =
      adam ? strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3))
           : strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  return train_one_pass(strategy, model, *optimizer, after_backward);
}

std::vector<std::pair<std::string, torch::Tensor>> train_conformance_steps(
    const Strategy& strategy, const ConformanceRun& run) {
  torch::manual_seed(7);
  auto model = strategy.mirror(models::make_tutorial_cnn());
  auto optimizer =
      run.adam
          ? strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3))
          : strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  Checkpoint checkpoint(model, optimizer.get());
  data::IteratorPosition position{0, run.from};
  if (!run.restore_from.empty()) {
    checkpoint.read(run.restore_from);
    position = checkpoint.state.position;
  }
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  int step = static_cast<int>(position.elements);
  for (const auto& batch :
       strategy.experimental_distribute_dataset(equivalence_data()).iterator_at(position)) {
    if (step++ == run.to) break;
    strategy.run(
        [&](const data::Element& b) {
          compute_average_loss(loss_fn(b[1], model->forward(b[0]))).backward();
          optimizer->apply_gradients();
        },
        batch);
  }
  if (!run.save_to.empty()) {
    checkpoint.gather_worker_states();  // every worker: a sharded strategy's slots are in shares
    checkpoint.state.step = run.to;
    checkpoint.state.position = {0, run.to};
    // In pieces (sharding 'parameters') every worker writes its own.
    if (strategy.is_chief() || checkpoint.written_in_pieces()) checkpoint.write(run.save_to);
  }
  model.variables().gather_values();  // every worker: sharded parameters are in chunks
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& p : model.primary()->named_parameters())
    weights.emplace_back(p.key(), p.value().detach().clone());
  return weights;
}

namespace {

// x minus its mean over the global batch: the sums and counts of every replica, all-reduced.
// (Cloneable, so that each replica gets its copy.)
struct GlobalCenteringImpl : torch::nn::Cloneable<GlobalCenteringImpl> {
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor sum = x.sum(0);
    torch::Tensor count = torch::full({1}, static_cast<double>(x.size(0)), x.options());
    if (ReplicaContext* context = get_replica_context()) {
      sum = context->all_reduce(ReduceOp::kSum, sum);  // differentiable: all-reduces in backward
      count = context->all_reduce(ReduceOp::kSum, count);
    }
    return x - sum / count;
  }
};
TORCH_MODULE(GlobalCentering);

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> train_global_centering_steps(
    const Strategy& strategy) {
  torch::manual_seed(5);
  auto model = strategy.mirror(
      torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 16), GlobalCentering(),
                            torch::nn::Functional(torch::tanh), torch::nn::Linear(16, 10)));
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(0.1));
  return train_one_pass(strategy, model, *optimizer);
}

std::vector<std::pair<std::string, torch::Tensor>> train_cyclegan_steps(const Strategy& strategy,
                                                                        bool adam, int steps) {
  torch::manual_seed(11);
  models::CycleGanOptions options;
  options.image_size = 16;
  options.generator_filters = 4;
  options.discriminator_filters = 4;
  options.optimizer = adam ? "adam" : "sgd";
  options.learning_rate = adam ? 2e-4 : 0.01;
  models::CycleGan gan(strategy, options);
  auto x = torch::rand({12, 1, 16, 16}) * 2 - 1;
  auto y = torch::rand({12, 1, 16, 16}).pow(2) * 2 - 1;  // another distribution
  auto data = data::Dataset::from_tensor_slices({x, y}).repeat(-1).batch(6);
  auto batches = strategy.experimental_distribute_dataset(data);
  std::map<std::string, torch::Tensor> losses;
  int taken = 0;
  for (const auto& batch : batches.iterator()) {
    if (taken++ == steps) break;
    losses = strategy.reduce(
        ReduceOp::kSum,
        strategy.run([&](const data::Element& b) { return gan.train_step(b[0], b[1]); }, batch));
  }
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  const std::pair<const char*, const Mirrored<keras::Functional>*> named_models[] = {
      {"generator_g", &gan.generator_g},
      {"generator_f", &gan.generator_f},
      {"discriminator_x", &gan.discriminator_x},
      {"discriminator_y", &gan.discriminator_y}};
  for (const auto& [name, model] : named_models)
    for (const auto& p : model->primary()->named_parameters())
      weights.emplace_back(std::string(name) + "." + p.key(), p.value().detach().clone());
  for (const auto& [key, value] : losses) weights.emplace_back("loss/" + key, value.clone());
  return weights;
}

namespace {

std::vector<std::pair<std::string, torch::Tensor>> named_values(const torch::nn::Module& module,
                                                                const std::string& prefix = "") {
  std::vector<std::pair<std::string, torch::Tensor>> values;
  for (const auto& p : module.named_parameters())
    values.emplace_back(prefix + p.key(), p.value().detach().clone());
  for (const auto& b : module.named_buffers())
    if (b.value().is_floating_point()) values.emplace_back(prefix + b.key(), b.value().clone());
  return values;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> train_batch_norm_steps(const Strategy& strategy,
                                                                          bool synchronized,
                                                                          int steps) {
  using namespace torch::nn;  // NOLINT(google-build-using-namespace): layer names
  constexpr double kLearningRate = 0.01;
  torch::manual_seed(9);
  // No bias before a batch norm: its gradient is 0 on one device, rounding noise elsewhere.
  Sequential net(Conv2d(Conv2dOptions(1, 4, 3).stride(2).bias(false)),
                 BatchNorm2d(BatchNormOptions(4)), ReLU(), Flatten(),
                 Linear(LinearOptions(4 * 13 * 13, 16).bias(false)),
                 BatchNorm1d(BatchNormOptions(16)), ReLU(), Linear(16, 10));
  if (synchronized) net = convert_sync_batchnorm(net);
  auto model = strategy.mirror(net);
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::SGD>(model, torch::optim::SGDOptions(kLearningRate));
  const auto before = named_values(*model.primary());
  SparseCategoricalCrossentropy loss_fn(true, Reduction::kNone);
  std::vector<std::pair<std::string, torch::Tensor>> first_step;
  int step = 0;
  for (const auto& batch :
       strategy.experimental_distribute_dataset(equivalence_data()).iterator()) {
    if (step++ == steps) break;
    auto outputs = strategy.run(
        [&](const data::Element& b) {
          auto logits = model->forward(b[0]);
          compute_average_loss(loss_fn(b[1], logits)).backward();
          optimizer->apply_gradients();
          return logits.detach();
        },
        batch);
    if (!first_step.empty()) continue;
    first_step.emplace_back("output/first_step", strategy.gather(outputs, 0));
    const auto after = named_values(*model.primary());
    for (size_t i = 0; i < after.size(); ++i)
      if (model.primary()->named_parameters().contains(after[i].first))
        first_step.emplace_back("gradient/" + after[i].first,
                                (before[i].second - after[i].second) / kLearningRate);
  }
  auto values = named_values(*model.primary());
  values.insert(values.end(), first_step.begin(), first_step.end());
  return values;
}

MultiWorkerMirroredStrategy overlapped_one_worker() {
  MultiWorkerOptions options;
  options.cluster = parse_tf_config(local_tf_config(free_loopback_ports(1), 0));
  options.replicas_per_worker = 2;
  options.threads_per_replica = 1;
  options.communication.timeout = std::chrono::seconds(20);
  options.communication.bytes_per_pack = 64;
  options.communication.overlap_with_backward = true;
  return MultiWorkerMirroredStrategy(options);
}

double max_relative_difference(const std::vector<torch::Tensor>& a,
                               const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::max(b[i].norm().item<double>(), 1e-12);
    worst = std::max(worst, (a[i] - b[i]).norm().item<double>() / scale);
  }
  return worst;
}

}  // namespace dist::testing
