// The Mirrored Strategy tutorial's "real-world application" in C++: its ResNet (Conv2D 7x7/2,
// BatchNormalization, ReLU, MaxPooling, six residual blocks with projection shortcuts,
// GlobalAveragePooling2D, Dense) trained with fit under MirroredStrategy, logging to
// TensorBoard with weight histograms every epoch and timing each epoch with a callback of its
// own (the tutorial's exercise). CIFAR-10 is not in Debian, so it trains on Fashion-MNIST
// padded to 32x32 (the model's first layer). Its BatchNormalization layers are synchronized:
// the replicas normalize over the global batch, as one device does.
//
//   fashion_mnist_resnet [epochs] [replicas] [limit] [out-dir] [data-dir]
//
//   epochs    default 5
//   replicas  default 2 (MirroredStrategy's devices cpu:0 .. cpu:<replicas - 1>)
//   limit     use at most this many examples of each split; 0 (default): all of them
//   out-dir   TensorBoard logs (default fashion_mnist_resnet_out)
//   data-dir  default /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "dist/data/mnist.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "dist/models/keras_models.h"
#include "dist/train/loss.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "fashion_mnist_resnet [epochs] [replicas] [limit] [out-dir] [data-dir]";

struct Args {
  int epochs = 5;
  int replicas = 2;
  int64_t limit = 0;  // 0: every example
  std::string out_dir = "fashion_mnist_resnet_out";
  std::string data_dir = dist::data::kFashionMnistDefaultDir;
};

Args parse_args(int argc, char** argv) {
  if (argc > 6) throw examples::UsageError("too many arguments");
  Args args;
  if (argc > 1) args.epochs = static_cast<int>(examples::parse_int(argv[1], "epochs", 1));
  if (argc > 2) args.replicas = static_cast<int>(examples::parse_int(argv[2], "replicas", 1));
  if (argc > 3) args.limit = examples::parse_int(argv[3], "limit", 0);
  if (argc > 4) args.out_dir = argv[4];
  if (argc > 5) args.data_dir = argv[5];
  return args;
}

// The tutorial's exercise: a callback that reports how long each epoch took.
class EpochTime : public dist::keras::Callback {
 public:
  void on_epoch_begin(int, const dist::keras::Logs&) override {
    start_ = std::chrono::steady_clock::now();
  }
  void on_epoch_end(int epoch, dist::keras::Logs& logs) override {
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start_;
    seconds.push_back(took.count());
    logs["epoch_seconds"] = took.count();
    std::printf("Epoch %d took %.1f s\n", epoch + 1, took.count());
    std::fflush(stdout);
  }
  std::vector<double> seconds;

 private:
  std::chrono::steady_clock::time_point start_;
};

int run(const Args& args) {
  using namespace dist::keras;
  using dist::data::Split;

  dist::MirroredOptions mirrored;
  for (int r = 0; r < args.replicas; ++r) mirrored.devices.push_back("cpu:" + std::to_string(r));
  dist::MirroredStrategy strategy(mirrored);
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << "\n";
  const int64_t global_batch = 64 * strategy.num_replicas_in_sync();

  dist::data::Dataset train = dist::data::fashion_mnist(args.data_dir, Split::kTrain);
  dist::data::Dataset test = dist::data::fashion_mnist(args.data_dir, Split::kTest);
  if (args.limit > 0) {
    train = train.take(args.limit);
    test = test.take(args.limit);
  }

  Model model = dist::models::keras_tutorial_resnet(/*synchronized_batch_norm=*/true);
  model.summary();
  model.compile(strategy, optimizers::Adam(1e-3),
                dist::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});

  auto epoch_time = std::make_shared<EpochTime>();
  FitOptions options;
  options.epochs = args.epochs;
  options.validation_data = test.batch(global_batch);
  // EpochTime first: its "epoch_seconds" reaches TensorBoard's scalars.
  options.callbacks = {epoch_time, std::make_shared<callbacks::TensorBoard>(args.out_dir + "/logs",
                                                                            /*update_freq=*/0,
                                                                            /*histogram_freq=*/1)};
  options.verbose = 2;  // a line per epoch
  model.fit(train.shuffle(train.cardinality(), /*seed=*/1).batch(global_batch), options);

  EvaluateOptions evaluate_options;
  evaluate_options.verbose = 0;
  Logs results = model.evaluate(test.batch(global_batch), evaluate_options);
  std::printf("Test loss %.4f, test accuracy %.4f after %d epochs on %d replicas\n",
              results.at("loss"), results.at("accuracy"), args.epochs,
              strategy.num_replicas_in_sync());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(parse_args(argc, argv)); });
}
