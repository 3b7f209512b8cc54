// The tf.distribute custom training loop in C++: Fashion-MNIST, the tutorial CNN.
// The loop is the same under every strategy; only the strategy object changes.
//
//   ./build/examples/custom_training_loop [one_device|mirrored|central_storage] [epochs] [data-dir]
#include <iostream>

#include <torch/torch.h>

#include "dist/data/mnist.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"

dist::Strategy make_strategy(const std::string& name) {
  if (name == "one_device") return dist::OneDeviceStrategy("cpu:0");
  if (name == "central_storage") return dist::CentralStorageStrategy();
  return dist::MirroredStrategy();  // one replica per core
}

int main(int argc, char** argv) {
  const std::string strategy_name = argc > 1 ? argv[1] : "mirrored";
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 1;
  const std::string data_dir = argc > 3 ? argv[3] : dist::data::kFashionMnistDefaultDir;

  dist::Strategy strategy = make_strategy(strategy_name);
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << "\n";
  const int64_t global_batch = 64 * strategy.num_replicas_in_sync();

  auto train = strategy.experimental_distribute_dataset(
      dist::data::fashion_mnist(data_dir, dist::data::Split::kTrain)
          .shuffle(60000, /*seed=*/1)
          .batch(global_batch));
  auto model = strategy.mirror(dist::models::make_tutorial_cnn());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  dist::SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, dist::Reduction::kNone);
  dist::metrics::SparseCategoricalAccuracy accuracy("accuracy");

  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total_loss = 0;
    int64_t batches = 0;
    for (const auto& batch : train.iterator(epoch)) {
      auto losses = strategy.run(
          [&](const dist::data::Element& b) {
            auto logits = model->forward(b[0]);
            auto loss = dist::compute_average_loss(loss_fn(b[1], logits));  // / global batch
            loss.backward();
            optimizer->apply_gradients();  // all-reduce across replicas, then one update
            accuracy.update_state(b[1], logits.detach());
            return loss.detach();
          },
          batch);
      total_loss += strategy.reduce(dist::ReduceOp::kSum, losses).item<double>();
      ++batches;
    }
    std::cout << "epoch " << epoch + 1 << ": loss " << total_loss / batches << ", accuracy "
              << accuracy.result() << "\n";
    accuracy.reset_state();
  }
  return 0;
}
