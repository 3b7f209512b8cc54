// The tf.distribute custom training loop template ("Custom training with tf.distribute.Strategy")
// in C++: Fashion-MNIST's training data split into training and validation sets, separate
// train, validation and test loops, each with its own loss and accuracy metrics. The loops are
// the same under every strategy; only the strategy object changes.
//
//   custom_loop_template [strategy] [epochs] [limit] [data-dir]
//
//   strategy  one_device | mirrored | central_storage (default mirrored)
//   epochs    default 10
//   limit     use at most this many training examples (split 5:1 into training and validation)
//             and test examples; 0 (default): all of them
//   data-dir  default /usr/share/datasets/fashion-mnist
#include <algorithm>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "dist/data/mnist.h"
#include "dist/models/reference_models.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "custom_loop_template [one_device|mirrored|central_storage] [epochs] [limit] [data-dir]";

struct Args {
  std::string strategy = "mirrored";
  int epochs = 10;
  int64_t limit = 0;
  std::string data_dir = dist::data::kFashionMnistDefaultDir;
};

Args parse_args(int argc, char** argv) {
  if (argc > 5) throw examples::UsageError("too many arguments");
  Args args;
  if (argc > 1) args.strategy = argv[1];
  if (argc > 2) args.epochs = static_cast<int>(examples::parse_int(argv[2], "epochs", 1));
  if (argc > 3) args.limit = examples::parse_int(argv[3], "limit", 0);
  if (argc > 4) args.data_dir = argv[4];
  return args;
}

// A loss and an accuracy, as every loop keeps them. Updated inside strategy.run(), they keep
// one state per replica and combine them in result(), so every example counts once whatever
// the split across replicas.
struct LoopMetrics {
  explicit LoopMetrics(const std::string& prefix)
      : loss(prefix + "loss"), accuracy(prefix + "accuracy") {}
  void reset() {
    loss.reset_state();
    accuracy.reset_state();
  }
  dist::metrics::Mean loss;
  dist::metrics::SparseCategoricalAccuracy accuracy;
};

// An epoch's line, as Keras prints it.
void print_epoch(int epoch, int epochs, LoopMetrics& train, LoopMetrics& validation) {
  std::cout << "Epoch " << epoch + 1 << "/" << epochs << ": loss " << train.loss.result()
            << ", accuracy " << train.accuracy.result() << ", val_loss " << validation.loss.result()
            << ", val_accuracy " << validation.accuracy.result() << "\n";
}

// The input: Fashion-MNIST's training data split into training and validation sets, and the
// test set, as datasets of global batches (the strategy splits each batch across the replicas).
struct Inputs {
  dist::DistributedDataset train, validation, test;
};

Inputs make_inputs(const dist::Strategy& strategy, const Args& args, int64_t global_batch) {
  using dist::data::Dataset;
  using dist::data::Split;
  Dataset all_train = dist::data::fashion_mnist(args.data_dir, Split::kTrain);
  Dataset test = dist::data::fashion_mnist(args.data_dir, Split::kTest);
  if (args.limit > 0) {
    all_train = all_train.take(args.limit);
    test = test.take(args.limit);
  }
  // The files hold the examples in random order, so the first five sixths are a fair training
  // set and the rest a fair validation set (50000 / 10000 for the whole data set). Split before
  // shuffling: a shuffled split would mix the two sets differently every epoch.
  const int64_t validation_size = all_train.cardinality() / 6;
  const int64_t train_size = all_train.cardinality() - validation_size;
  Dataset train = all_train.take(train_size);
  Dataset validation = all_train.skip(train_size);
  std::cout << train_size << " training, " << validation_size << " validation and "
            << test.cardinality() << " test examples\n";

  // Datasets of global batches; the strategy splits each batch across the replicas.
  return {strategy.experimental_distribute_dataset(
              train.shuffle(train_size, /*seed=*/1).batch(global_batch)),
          strategy.experimental_distribute_dataset(validation.batch(global_batch)),
          strategy.experimental_distribute_dataset(test.batch(global_batch))};
}

int run(const Args& args) {
  using dist::data::Element;
  dist::Strategy strategy = examples::make_strategy(args.strategy);
  std::cout << "Strategy " << strategy.name() << ", number of replicas "
            << strategy.num_replicas_in_sync() << "\n";
  const int64_t global_batch = 64 * strategy.num_replicas_in_sync();

  // --- input: training, validation and test sets ---
  const Inputs inputs = make_inputs(strategy, args, global_batch);

  // --- model, optimizer, loss: created through the strategy ("in its scope") ---
  auto model = strategy.mirror(dist::models::make_tutorial_cnn());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  // Per-example losses (Reduction::kNone): compute_average_loss divides their sum by the
  // GLOBAL batch size, so that summing the replicas' gradients gives the global mean's.
  dist::SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, dist::Reduction::kNone);

  LoopMetrics train_metrics("train_"), validation_metrics("val_"), test_metrics("test_");

  // --- one replica's steps ---
  auto train_step = [&](const Element& batch) {
    at::Tensor logits = model->forward(batch[0]);
    at::Tensor per_example_loss = loss_fn(batch[1], logits);
    at::Tensor loss = dist::compute_average_loss(per_example_loss);
    loss.backward();
    optimizer->apply_gradients();  // all-reduces the gradients, then one identical update
    train_metrics.loss.update_state(per_example_loss.detach());
    train_metrics.accuracy.update_state(batch[1], logits.detach());
  };
  // Evaluation for the validation and test loops. The guard is thread-local, so it must be
  // made here, in the replica's thread, not around strategy.run().
  auto evaluation_step = [&](const Element& batch, LoopMetrics& metrics) {
    torch::NoGradGuard no_grad;
    at::Tensor logits = model->forward(batch[0]);
    metrics.loss.update_state(loss_fn(batch[1], logits));
    metrics.accuracy.update_state(batch[1], logits);
  };
  // Every batch of `data` through evaluation_step, in evaluation mode.
  auto evaluate = [&](const dist::DistributedDataset& data, LoopMetrics& metrics) {
    metrics.reset();
    model.eval();  // every copy: layers such as dropout or batch norm change behaviour
    for (const auto& batch : data.iterator(0))
      strategy.run([&](const Element& b) { evaluation_step(b, metrics); }, batch);
    model.train();
  };

  // --- the loops ---
  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    train_metrics.reset();  // each epoch reports its own results, as Keras does
    for (const auto& batch : inputs.train.iterator(epoch)) strategy.run(train_step, batch);
    evaluate(inputs.validation, validation_metrics);
    print_epoch(epoch, args.epochs, train_metrics, validation_metrics);
  }
  // The test set is used once, after training and model selection are done.
  evaluate(inputs.test, test_metrics);
  std::cout << "Test loss " << test_metrics.loss.result() << ", test accuracy "
            << test_metrics.accuracy.result() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(parse_args(argc, argv)); });
}
