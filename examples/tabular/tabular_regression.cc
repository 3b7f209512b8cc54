// A regression on tabular TFRecords: rows of float features and a float target, stored as
// tf.train.Example, learned by a small MLP with mean squared error under any strategy.
// docs/guide.md, "Tabular", walks through it.
//
//   tabular_regression prepare DATA_DIR [ROWS=20000] [SHARDS=4]
//       Writes ROWS rows of Friedman's benchmark function #1 (J. Friedman, "Multivariate
//       adaptive regression splines", 1991): ten features x uniform in [0, 1], of which five
//       matter, y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 + 10 x3 + 5 x4 + noise of variance 1:
//       DATA_DIR/train-*.tfrecord (SHARDS shards) and DATA_DIR/test.tfrecord (a tenth of the
//       rows), each record an Example with a float list "x" of 10 and a float "y".
//   tabular_regression train DATA_DIR [STRATEGY=mirrored] [STEPS=2000] [BATCH=64]
//       Trains for STEPS steps of BATCH rows per replica (Adam 3e-3) under STRATEGY
//       (one_device, mirrored, central_storage, or multi_worker_mirrored with the workers of
//       TF_CONFIG, where every worker prints the same test error), then prints the test set's mean
//       squared error beside the noise's variance (the best any model can do) and that of
//       predicting the mean (the worst a useful one does).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/tfrecord.h"
#include "dist/data/tfrecord_dataset.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/train/loss.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "tabular_regression prepare DATA_DIR [ROWS=20000] [SHARDS=4]\n"
    "       tabular_regression train DATA_DIR [STRATEGY=mirrored] [STEPS=2000] [BATCH=64]\n"
    "       STRATEGY: one_device, mirrored, central_storage or multi_worker_mirrored";
constexpr int64_t kFeatures = 10;
constexpr double kNoiseVariance = 1.0;

int prepare(int argc, char** argv) {
  if (argc < 3 || argc > 5) throw examples::UsageError("prepare takes DATA_DIR");
  const std::string dir = argv[2];
  const int64_t rows = argc > 3 ? examples::parse_int(argv[3], "ROWS", 10) : 20000;
  const int64_t shards = argc > 4 ? examples::parse_int(argv[4], "SHARDS", 1) : 4;
  std::filesystem::create_directories(dir);
  torch::manual_seed(0);
  const at::Tensor x = torch::rand({rows, kFeatures});
  const at::Tensor y = 10 * torch::sin(M_PI * x.select(1, 0) * x.select(1, 1)) +
                       20 * (x.select(1, 2) - 0.5).square() + 10 * x.select(1, 3) +
                       5 * x.select(1, 4) + std::sqrt(kNoiseVariance) * torch::randn({rows});
  std::vector<std::unique_ptr<dist::data::TFRecordWriter>> train;
  for (int64_t s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "/train-%05lld-of-%05lld.tfrecord", static_cast<long long>(s),
                  static_cast<long long>(shards));
    train.push_back(std::make_unique<dist::data::TFRecordWriter>(dir + name));
  }
  dist::data::TFRecordWriter test(dir + "/test.tfrecord");
  for (int64_t i = 0; i < rows; ++i) {
    const float* features = x[i].data_ptr<float>();
    const std::string record =
        dist::data::ExampleBuilder()
            .add_float("x", std::vector<float>(features, features + kFeatures))
            .add_float("y", y[i].item<float>())
            .serialize();
    if (i % 10 == 0) {
      test.write(record);
    } else {
      train[static_cast<size_t>(i % shards)]->write(record);
    }
  }
  for (auto& writer : train) writer->close();
  test.close();
  std::printf("Wrote %lld rows of %lld features to %s\n", static_cast<long long>(rows),
              static_cast<long long>(kFeatures), dir.c_str());
  return 0;
}

// Rows {"x": [10] float, "y": [] float} parsed from Examples (named by the spec).
dist::data::Dataset rows_of(const std::vector<std::string>& files) {
  const dist::data::FeatureSpec spec(
      {dist::data::FixedLenFeature("x", dist::data::FeatureType::kFloat, {kFeatures}),
       dist::data::FixedLenFeature("y", dist::data::FeatureType::kFloat, {})});
  return dist::data::tfrecord_dataset(files).map([spec](dist::data::Element record) {
    return dist::data::parse_example(dist::data::bytes_view(record[0]), spec);
  });
}

torch::nn::Sequential make_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 1));
}

int train(int argc, char** argv) {
  if (argc < 3 || argc > 6) throw examples::UsageError("train takes DATA_DIR");
  const std::string dir = argv[2];
  const std::string strategy_name = argc > 3 ? argv[3] : "mirrored";
  const dist::Strategy strategy = strategy_name == "multi_worker_mirrored"
                                      ? dist::Strategy(dist::MultiWorkerMirroredStrategy())
                                      : examples::make_strategy(strategy_name);
  const int64_t steps = argc > 4 ? examples::parse_int(argv[4], "STEPS", 1) : 2000;
  const int64_t batch = argc > 5 ? examples::parse_int(argv[5], "BATCH", 1) : 64;
  const int64_t global_batch = batch * strategy.num_replicas_in_sync();

  auto train_data = strategy.experimental_distribute_dataset(
      rows_of(dist::data::match_files(dir + "/train-*.tfrecord"))
          .cache()
          .shuffle(1 << 16, /*seed=*/1)
          .repeat()
          .batch(global_batch, /*drop_remainder=*/true)
          .prefetch());
  torch::manual_seed(0);
  auto model = strategy.mirror(make_mlp());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(3e-3));
  // Per-row squared errors, averaged over the GLOBAL batch by compute_average_loss: the
  // replicas' summed gradients are then one device's gradient of the global batch's mean.
  const dist::MeanSquaredError mse(dist::Reduction::kNone);
  std::printf("Training on %d replicas, %lld rows a step\n", strategy.num_replicas_in_sync(),
              static_cast<long long>(global_batch));
  int64_t step = 0;
  for (const auto& per_replica : train_data.iterator()) {
    auto losses = strategy.run(
        [&](const dist::data::Element& b) {
          // b["x"]: [rows, 10]; b["y"]: [rows]; predictions [rows, 1] (y's trailing axis).
          at::Tensor loss = dist::compute_average_loss(mse(b["y"], model->forward(b["x"])));
          loss.backward();
          optimizer->apply_gradients();
          return loss.detach();
        },
        per_replica);
    ++step;
    if (step % 500 == 0 || step == steps)
      std::printf("step %lld: training MSE %.4f\n", static_cast<long long>(step),
                  strategy.reduce(dist::ReduceOp::kSum, losses).item<double>());
    if (step == steps) break;
  }

  torch::NoGradGuard no_grad;
  const dist::data::Element test =
      *rows_of({dir + "/test.tfrecord"}).batch(1 << 20).iterator().next();
  model.eval();
  const at::Tensor predictions = model->forward(test["x"]).squeeze(1);
  const double test_mse = (predictions - test["y"]).square().mean().item<double>();
  const double mean_mse = (test["y"] - test["y"].mean()).square().mean().item<double>();
  std::printf("Test MSE %.4f over %lld rows (noise variance %.1f; predicting the mean: %.4f)\n",
              test_mse, static_cast<long long>(test["y"].size(0)), kNoiseVariance, mean_mse);
  return 0;
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "prepare") return prepare(argc, argv);
  if (command == "train") return train(argc, argv);
  throw examples::UsageError(command.empty() ? "a command is required"
                                             : "unknown command '" + command + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(argc, argv); });
}
