// A CIFAR-10 ResNet v1 (He et al., "Deep Residual Learning", section 4.2; the Keras CIFAR-10
// ResNet example) built with the functional API, trained with fit under a strategy, its
// learning rate scaled linearly with the global batch and warmed up.
//
//   cifar10_resnet <data-dir> [strategy] [epochs] [n] [limit]
//
//   data-dir  CIFAR-10 binary batches: data_batch_1.bin .. data_batch_5.bin and test_batch.bin
//             (cifar-10-binary.tar.gz unpacked; the cifar-10-batches-bin folder also works)
//   strategy  one_device | mirrored | central_storage (default mirrored)
//   epochs    default 30
//   n         residual blocks per stage (default 3): depth 6n + 2, so 3 is ResNet-20,
//             5 ResNet-32, 9 ResNet-56
//   limit     use at most this many examples of each split; 0 (default): all of them
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "dist/data/cifar10.h"
#include "dist/keras/callbacks.h"
#include "dist/keras/model.h"
#include "dist/train/learning_rate_scaling.h"
#include "dist/train/loss.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "cifar10_resnet <data-dir> [one_device|mirrored|central_storage] [epochs] [n] [limit]";

// He et al.'s CIFAR-10 recipe: SGD with momentum 0.9, learning rate 0.1 at batch 128.
constexpr double kBaseLearningRate = 0.1;
constexpr int64_t kBaseBatch = 128;
constexpr int kWarmupEpochs = 5;

struct Args {
  std::string data_dir;
  std::string strategy = "mirrored";
  int epochs = 30;
  int n = 3;
  int64_t limit = 0;
};

Args parse_args(int argc, char** argv) {
  if (argc < 2) throw examples::UsageError("the data directory is required");
  if (argc > 6) throw examples::UsageError("too many arguments");
  Args args;
  args.data_dir = argv[1];
  if (argc > 2) args.strategy = argv[2];
  if (argc > 3) args.epochs = static_cast<int>(examples::parse_int(argv[3], "epochs", 1));
  if (argc > 4) args.n = static_cast<int>(examples::parse_int(argv[4], "n", 1));
  if (argc > 5) args.limit = examples::parse_int(argv[5], "limit", 0);
  return args;
}

using dist::keras::KerasTensor;
namespace layers = dist::keras::layers;

// Conv2D ("same" padding) then BatchNormalization, then ReLU if `relu`. The convolution has no
// bias: the normalization's beta would cancel it.
KerasTensor conv_bn(const KerasTensor& x, int64_t filters, int64_t kernel_size, int64_t strides,
                    bool relu) {
  KerasTensor y =
      layers::Conv2D(filters, kernel_size).strides(strides).padding("same").use_bias(false)(x);
  y = layers::BatchNormalization()(y);
  return relu ? layers::ReLU()(y) : y;
}

// ResNet v1 for 32x32 inputs: depth 6n + 2.
dist::keras::Model make_resnet(int n) {
  KerasTensor inputs = dist::keras::Input({3, 32, 32});
  KerasTensor x = conv_bn(inputs, 16, 3, 1, /*relu=*/true);
  int64_t filters = 16;
  for (int stage = 0; stage < 3; ++stage) {
    for (int block = 0; block < n; ++block) {
      // Stages 2 and 3 halve the feature map and double the filters in their first block.
      const bool downsample = stage > 0 && block == 0;
      const int64_t strides = downsample ? 2 : 1;
      KerasTensor y = conv_bn(x, filters, 3, strides, /*relu=*/true);
      y = conv_bn(y, filters, 3, 1, /*relu=*/false);
      // The shortcut must match y's shape: a strided 1x1 convolution projects it.
      KerasTensor shortcut = downsample ? conv_bn(x, filters, 1, strides, /*relu=*/false) : x;
      x = layers::ReLU()(layers::Add()({shortcut, y}));
    }
    filters *= 2;
  }
  KerasTensor outputs = layers::Dense(10)(layers::GlobalAveragePooling2D()(x));  // logits
  return dist::keras::Model(inputs, outputs, "resnet");
}

// The first `limit` examples of a split (all of them when limit is 0).
dist::data::ImageLabelTensors load(const std::string& dir, dist::data::Split split, int64_t limit) {
  dist::data::ImageLabelTensors data = dist::data::load_cifar10(dir, split);
  if (limit > 0) {
    data.images = data.images.slice(0, 0, limit);
    data.labels = data.labels.slice(0, 0, limit);
  }
  return data;
}

int run(const Args& args) {
  using namespace dist::keras;
  using dist::data::Split;

  dist::Strategy strategy = examples::make_strategy(args.strategy);
  const int64_t global_batch = kBaseBatch * strategy.num_replicas_in_sync();
  // N replicas at batch 128 each average N times as many examples per step: raise the
  // learning rate N times (Goyal et al.), warming up to it so the first steps do not diverge.
  const double learning_rate =
      dist::scale_learning_rate_linear(kBaseLearningRate, kBaseBatch, global_batch);
  std::cout << "Strategy " << strategy.name() << ", " << strategy.num_replicas_in_sync()
            << " replicas, global batch " << global_batch << ", learning rate " << learning_rate
            << " after " << kWarmupEpochs << " warmup epochs\n";

  dist::data::ImageLabelTensors train_data = load(args.data_dir, Split::kTrain, args.limit);
  dist::data::ImageLabelTensors test_data = load(args.data_dir, Split::kTest, args.limit);
  // Subtract the training images' per-channel mean from both splits (the Keras example's
  // subtract_pixel_mean, per channel): centred inputs train faster.
  at::Tensor channel_mean = train_data.images.mean({0, 2, 3}, /*keepdim=*/true).squeeze(0);
  auto train = dist::data::Dataset::from_tensor_slices(
      {train_data.images - channel_mean, train_data.labels});
  auto test =
      dist::data::Dataset::from_tensor_slices({test_data.images - channel_mean, test_data.labels});

  Model model = make_resnet(args.n);
  std::cout << "ResNet-" << 6 * args.n + 2 << ": " << model.count_params() << " parameters\n";
  model.compile(strategy, optimizers::SGD(learning_rate, /*momentum=*/0.9),
                dist::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});

  // Warmup, then the step decay of He et al.: divide by 10 at 50% and at 75% of the epochs.
  const int epochs = args.epochs;
  auto schedule = [learning_rate, epochs](int epoch, double /*current*/) {
    if (epoch < kWarmupEpochs)
      return dist::warmup_learning_rate(epoch, learning_rate, kWarmupEpochs);
    if (epoch >= epochs * 3 / 4) return learning_rate * 0.01;
    if (epoch >= epochs / 2) return learning_rate * 0.1;
    return learning_rate;
  };
  FitOptions options;
  options.epochs = epochs;
  options.validation_data = test.batch(global_batch);
  options.callbacks = {std::make_shared<callbacks::LearningRateScheduler>(schedule)};
  options.verbose = 2;

  History history =
      model.fit(train.shuffle(train.cardinality(), /*seed=*/1).batch(global_batch), options);
  for (size_t i = 0; i < history.epoch.size(); ++i)
    std::cout << "epoch " << history.epoch[i] + 1 << ": lr " << history.history.at("lr")[i]
              << ", val_accuracy " << history.history.at("val_accuracy")[i] << "\n";

  EvaluateOptions evaluate_options;
  evaluate_options.verbose = 0;
  Logs results = model.evaluate(test.batch(global_batch), evaluate_options);
  std::cout << "Test loss " << results.at("loss") << ", test accuracy " << results.at("accuracy")
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(parse_args(argc, argv)); });
}
