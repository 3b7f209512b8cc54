// What the Fashion-MNIST training benchmarks share (ps_bench.cc, multi_worker_bench.cc): their
// flags, the test accuracy of the trained model, and the one JSON line of results that
// bench/compare_parameter_server.sh reads.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "dist/core/error.h"
#include "dist/data/mnist.h"
#include "dist/models/reference_models.h"
#include "hashed_patch_model.h"

namespace dist::bench {

constexpr int64_t kFashionMnistTrainExamples = 60000;

struct TrainFlags {
  int epochs = 3;
  int64_t batch = 64;           // examples per worker and step
  int64_t steps_per_epoch = 0;  // 0: the full epoch
  double lr = 0.05;             // SGD
  std::string model = "cnn";    // a dist::models::make_model name, or "embedding"
};

// "embedding": make_hashed_patch_model(); anything else: dist::models::make_model(name).
inline torch::nn::Sequential make_bench_model(const std::string& name) {
  return name == "embedding" ? make_hashed_patch_model() : models::make_model(name);
}

// Parses --epochs N --batch N --steps-per-epoch N --lr X --model M from argv[first..];
// InvalidArgument naming the flag for anything else or a value out of range.
inline TrainFlags parse_train_flags(int argc, char** argv, int first) {
  TrainFlags flags;
  for (int i = first; i < argc; i += 2) {
    const std::string flag = argv[i];
    DIST_CHECK_ARG(i + 1 < argc, "flag ", flag, " needs a value");
    const char* value = argv[i + 1];
    if (flag == "--epochs")
      flags.epochs = std::atoi(value);
    else if (flag == "--batch")
      flags.batch = std::atoll(value);
    else if (flag == "--steps-per-epoch")
      flags.steps_per_epoch = std::atoll(value);
    else if (flag == "--lr")
      flags.lr = std::atof(value);
    else if (flag == "--model")
      flags.model = value;
    else
      DIST_CHECK_ARG(false, "unknown flag '", flag,
                     "'; the flags are --epochs, --batch, --steps-per-epoch, --lr and --model");
  }
  DIST_CHECK_ARG(flags.epochs > 0 && flags.batch > 0 && flags.steps_per_epoch >= 0 && flags.lr > 0,
                 "--epochs ", flags.epochs, ", --batch ", flags.batch, ", --steps-per-epoch ",
                 flags.steps_per_epoch, ", --lr ", flags.lr,
                 ": epochs, batch and lr must be positive, steps per epoch 0 (full) or more");
  return flags;
}

// Fraction of the 10,000 Fashion-MNIST test images `model` classifies correctly (eval mode,
// batches of 1000).
inline double fashion_mnist_test_accuracy(torch::nn::Sequential model) {
  const auto test = data::load_mnist_format(data::kFashionMnistDefaultDir, data::Split::kTest);
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  int64_t correct = 0;
  const int64_t n = test.images.size(0);
  for (int64_t start = 0; start < n; start += 1000) {
    const int64_t end = std::min(n, start + 1000);
    const auto logits = model->forward(test.images.slice(0, start, end));
    correct += logits.argmax(1).eq(test.labels.slice(0, start, end)).sum().item<int64_t>();
  }
  model->train(was_training);
  return static_cast<double>(correct) / static_cast<double>(n);
}

struct TrainResult {
  std::string strategy;
  int workers = 0;
  TrainFlags flags;
  int64_t steps = 0;   // steps taken in all epochs (a ps step is one worker's batch)
  int64_t images = 0;  // training images processed
  double seconds = 0;  // wall time of the training loop
  double test_accuracy = 0;
  // Bytes one worker moves per step of its batch: to and from the ps tasks (counted), or
  // through its all-reduce (computed from the gradient sizes).
  double bytes_out_per_step = 0;
  double bytes_in_per_step = 0;
};

inline void print_json(const TrainResult& r) {
  std::printf(
      "{\"strategy\": \"%s\", \"workers\": %d, \"epochs\": %d, \"batch_per_worker\": %lld, "
      "\"lr\": %g, \"model\": \"%s\", \"steps\": %lld, \"images\": %lld, \"seconds\": %.3f, "
      "\"images_per_s\": %.1f, \"test_accuracy\": %.4f, \"bytes_out_per_step\": %.0f, "
      "\"bytes_in_per_step\": %.0f}\n",
      r.strategy.c_str(), r.workers, r.flags.epochs, static_cast<long long>(r.flags.batch),
      r.flags.lr, r.flags.model.c_str(), static_cast<long long>(r.steps),
      static_cast<long long>(r.images), r.seconds, static_cast<double>(r.images) / r.seconds,
      r.test_accuracy, r.bytes_out_per_step, r.bytes_in_per_step);
  std::fflush(stdout);
}

}  // namespace dist::bench
