// Keras-style training in C++: the TensorFlow tutorial CNN on Fashion-MNIST with
// Sequential / compile / fit / evaluate, distributed by the strategy it is compiled under
// (the C++ version of the "Distributed training with Keras" tutorial).
//
//   fashion_mnist_fit [strategy] [epochs] [limit] [out-dir] [data-dir]
//
//   strategy  one_device | mirrored | central_storage (default mirrored: one replica per core)
//   epochs    default 10 (EarlyStopping may end training sooner)
//   limit     use at most this many examples of each split; 0 (default): all of them
//   out-dir   TensorBoard logs, training.csv and weight checkpoints (default fashion_mnist_fit_out)
//   data-dir  default /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)
#include <iostream>
#include <memory>
#include <string>

#include "dist/data/mnist.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "dist/train/loss.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "fashion_mnist_fit [one_device|mirrored|central_storage] [epochs] [limit] [out-dir] "
    "[data-dir]";

struct Args {
  std::string strategy = "mirrored";
  int epochs = 10;
  int64_t limit = 0;  // 0: every example
  std::string out_dir = "fashion_mnist_fit_out";
  std::string data_dir = dist::data::kFashionMnistDefaultDir;
};

Args parse_args(int argc, char** argv) {
  if (argc > 6) throw examples::UsageError("too many arguments");
  Args args;
  if (argc > 1) args.strategy = argv[1];
  if (argc > 2) args.epochs = static_cast<int>(examples::parse_int(argv[2], "epochs", 1));
  if (argc > 3) args.limit = examples::parse_int(argv[3], "limit", 0);
  if (argc > 4) args.out_dir = argv[4];
  if (argc > 5) args.data_dir = argv[5];
  return args;
}

// The CNN of TensorFlow's "Distributed training with Keras" tutorial (channels first).
dist::keras::Model make_model() {
  using namespace dist::keras;
  return Sequential({1, 28, 28},
                    {layers::Conv2D(32, 3).activation("relu"), layers::MaxPooling2D(),
                     layers::Conv2D(64, 3).activation("relu"), layers::MaxPooling2D(),
                     layers::Flatten(), layers::Dense(64, "relu"), layers::Dense(10)},
                    "fashion_mnist_cnn");
}

int run(const Args& args) {
  using namespace dist::keras;
  using dist::data::Split;

  dist::Strategy strategy = examples::make_strategy(args.strategy);
  std::cout << "Strategy " << strategy.name() << ", number of replicas "
            << strategy.num_replicas_in_sync() << "\n";
  // 64 examples per replica: the global batch grows with the replicas, as in the tutorial.
  const int64_t global_batch = 64 * strategy.num_replicas_in_sync();

  dist::data::Dataset train = dist::data::fashion_mnist(args.data_dir, Split::kTrain);
  dist::data::Dataset test = dist::data::fashion_mnist(args.data_dir, Split::kTest);
  if (args.limit > 0) {
    train = train.take(args.limit);
    test = test.take(args.limit);
  }
  const int64_t train_size = train.cardinality();

  Model model = make_model();
  model.summary();
  model.compile(strategy, optimizers::Adam(1e-3),
                dist::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});

  auto early_stopping = std::make_shared<callbacks::EarlyStopping>(
      "val_loss", /*patience=*/2, /*min_delta=*/0, "auto", /*restore_best_weights=*/true);
  FitOptions options;
  options.epochs = args.epochs;
  options.validation_data = test.batch(global_batch);
  options.callbacks = {std::make_shared<callbacks::TensorBoard>(args.out_dir + "/logs"),
                       std::make_shared<callbacks::CSVLogger>(args.out_dir + "/training.csv"),
                       std::make_shared<callbacks::ModelCheckpoint>(
                           args.out_dir + "/ckpt/weights-{epoch:02d}.safetensors"),
                       early_stopping};
  // verbose 2 (a line per epoch) keeps logs readable when the output is not a terminal.
  options.verbose = 2;

  // A shuffle buffer as large as the data set gives a uniform shuffle, new every epoch.
  History history = model.fit(train.shuffle(train_size, /*seed=*/1).batch(global_batch), options);
  if (early_stopping->stopped_epoch() >= 0)
    std::cout << "Early stopping after epoch " << early_stopping->stopped_epoch() + 1
              << "; weights restored from epoch " << early_stopping->best_epoch() + 1 << "\n";

  EvaluateOptions evaluate_options;
  evaluate_options.verbose = 0;
  Logs results = model.evaluate(test.batch(global_batch), evaluate_options);
  std::cout << "Test loss " << results.at("loss") << ", test accuracy " << results.at("accuracy")
            << " (" << history.epoch.size() << " epochs trained)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(parse_args(argc, argv)); });
}
