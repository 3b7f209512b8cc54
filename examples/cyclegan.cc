// CycleGAN in a custom training loop, as TensorFlow's distributed CycleGAN tutorial trains it:
// two generators, two discriminators, four optimizers, losses returned by name and reduced per
// key, a progress bar, TensorBoard scalars and images, a checkpoint every few epochs, and after
// each epoch a picture of the translations. The two domains come from Fashion-MNIST: sneakers
// (X) and ankle boots (Y), padded to 32x32.
//
//   ./build/examples/cyclegan [--strategy mirrored] [--epochs 20] [--out runs/cyclegan]
//
// Look at OUT/images/epoch_NNN.png (rows: X, G(X), F(G(X)), then Y, F(Y), G(F(Y))), and at
// `tensorboard --logdir OUT/logs` (losses, the cycle errors, and the same grids). Killed and
// started again with the same arguments, it resumes from the latest checkpoint in OUT/ckpts.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <torch/torch.h>

#include "dist/data/augment.h"
#include "dist/data/mnist.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/models/cyclegan.h"
#include "dist/train/checkpoint.h"
#include "dist/train/image_io.h"
#include "dist/train/progress_bar.h"
#include "dist/train/summary_writer.h"
#include "example_args.h"

namespace {

using dist::data::Dataset;
using dist::data::Element;

constexpr int64_t kSneaker = 7, kAnkleBoot = 9;  // Fashion-MNIST labels
constexpr int64_t kSize = 32;                    // 28x28 padded: the U-Net halves it to 1x1
constexpr int64_t kPlotted = 5;                  // examples per direction in the pictures

struct Options {
  std::string strategy = "mirrored";
  int64_t epochs = 20;
  std::string out = "runs/cyclegan";
  std::string data_dir = dist::data::kFashionMnistDefaultDir;
  int64_t batch_per_replica = 8;
  int64_t steps_per_epoch = -1;  // -1: all of the smaller domain
  int64_t test_batches = 4;
  int64_t checkpoint_every = 5;  // epochs
  int64_t filters = 16;
  uint64_t seed = 1;
  int64_t kill_at_step = -1;
  bool progress = true;
};

dist::Strategy make_strategy(const std::string& name) {
  if (name == "multi_worker_mirrored") return dist::MultiWorkerMirroredStrategy();
  try {
    return examples::make_strategy(name);
  } catch (const examples::UsageError&) {  // its list lacks the strategy this example adds
    throw examples::UsageError("unknown strategy '" + name +
                               "'; use one_device, mirrored, central_storage or "
                               "multi_worker_mirrored");
  }
}

// One domain's images, [N, 1, 32, 32] in [0, 1] (the background stays 0).
at::Tensor domain(const dist::data::ImageLabelTensors& data, int64_t label) {
  at::Tensor rows = (data.labels == label).nonzero().flatten();
  return at::constant_pad_nd(data.images.index_select(0, rows), {2, 2, 2, 2}, 0.0);
}

// The tutorial's preprocessing: training images get random jitter (resize to 36, crop back to
// 32) and random mirroring, keyed on (seed, epoch, example), so a resumed run and any number
// of replicas see the same images; test images are only scaled to [-1, 1].
Dataset train_domain(const at::Tensor& images, uint64_t seed) {
  using namespace dist::data;  // NOLINT: the transforms read better unqualified
  return Dataset::from_tensor_slices({images})
      .map_with_context(compose({random_jitter(seed, 36, kSize, Interpolation::kBilinear),
                                 random_flip_left_right(seed + 1), normalize_to_unit_range(0, 1)}))
      .shuffle(images.size(0), seed + 2);
}

// Sums per key of a step's loss dictionary, reduced across the replicas (each replica's
// losses are already scaled by the global batch, so the sum is the global batch's mean).
void add_reduced(const dist::Strategy& strategy,
                 const dist::PerReplica<std::map<std::string, at::Tensor>>& per_replica,
                 std::map<std::string, double>& sums) {
  for (const auto& [key, value] : strategy.reduce(dist::ReduceOp::kSum, per_replica))
    sums[key] += value.item<double>();
}

std::map<std::string, double> divided(std::map<std::string, double> sums, int64_t count) {
  for (auto& [key, sum] : sums) sum /= static_cast<double>(std::max<int64_t>(count, 1));
  return sums;
}

at::Tensor to_unit_range(const at::Tensor& images) { return images * 2 - 1; }

std::string format_losses(const std::map<std::string, double>& values) {
  std::ostringstream text;
  text.precision(4);
  bool first = true;
  for (const char* key : {"loss_G/total", "loss_F/total", "loss_X/loss", "loss_Y/loss"}) {
    auto it = values.find(key);
    if (it == values.end()) continue;
    text << (first ? "" : " - ") << key << ": " << it->second;
    first = false;
  }
  return text.str();
}

// Rows of kPlotted images: the inputs, their translations, and the translations back.
at::Tensor translation_grid(const dist::Mirrored<dist::keras::Functional>& forward,
                            const dist::Mirrored<dist::keras::Functional>& backward,
                            const at::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  dist::keras::Functional there = forward.primary(), back_again = backward.primary();
  there->eval();
  back_again->eval();
  at::Tensor translated = there->forward(inputs);
  at::Tensor back = back_again->forward(translated);
  there->train();
  back_again->train();
  const at::Tensor rows = at::cat({inputs, translated, back});
  return dist::image_grid(rows.unbind(0), kPlotted, 2, /*pad_value=*/1.0);  // white borders
}

// The two domains as the tutorial feeds them: zipped training batches of both (`steps` per
// epoch), the test batches, and the test images the pictures show.
struct Data {
  dist::DistributedDataset train, test;
  int64_t steps = 0;
  at::Tensor plot_x, plot_y;
};

Data make_data(const dist::Strategy& strategy, const Options& o, int64_t global_batch) {
  auto train_data = dist::data::load_mnist_format(o.data_dir, dist::data::Split::kTrain);
  auto test_data = dist::data::load_mnist_format(o.data_dir, dist::data::Split::kTest);
  at::Tensor train_x = domain(train_data, kSneaker), train_y = domain(train_data, kAnkleBoot);
  at::Tensor test_x = to_unit_range(domain(test_data, kSneaker));
  at::Tensor test_y = to_unit_range(domain(test_data, kAnkleBoot));
  // Both domains the same length per epoch (Dataset::zip stops at the shorter one).
  int64_t steps = std::min(train_x.size(0), train_y.size(0)) / global_batch;
  if (o.steps_per_epoch > 0) steps = std::min(steps, o.steps_per_epoch);
  if (steps < 1)
    throw examples::UsageError("the global batch of " + std::to_string(global_batch) +
                               " is larger than a domain of the data");
  auto train_set = strategy.experimental_distribute_dataset(
      Dataset::zip({train_domain(train_x, o.seed), train_domain(train_y, o.seed + 10)})
          .batch(global_batch, /*drop_remainder=*/true)
          .take(steps));
  auto test_set = strategy.experimental_distribute_dataset(
      Dataset::zip({Dataset::from_tensor_slices({test_x}), Dataset::from_tensor_slices({test_y})})
          .batch(global_batch, /*drop_remainder=*/true)
          .take(o.test_batches));
  return {std::move(train_set), std::move(test_set), steps, test_x.narrow(0, 0, kPlotted),
          test_y.narrow(0, 0, kPlotted)};
}

dist::models::CycleGan make_gan(const dist::Strategy& strategy, const Options& o) {
  torch::manual_seed(static_cast<uint64_t>(o.seed));  // the same initial weights every run
  dist::models::CycleGanOptions gan_options;
  gan_options.image_size = kSize;
  gan_options.generator_filters = o.filters;
  gan_options.discriminator_filters = o.filters;
  gan_options.dropout_seed = o.seed;
  return dist::models::CycleGan(strategy, gan_options);
}

// One epoch of training steps; returns the sums of the losses per key, and counts the steps.
std::map<std::string, double> train_epoch(const dist::Strategy& strategy,
                                          dist::models::CycleGan& gan, const Data& data,
                                          const Options& o, int64_t epoch, int64_t& step,
                                          int64_t& taken) {
  std::optional<dist::ProgressBar> bar;
  if (strategy.is_chief() && o.progress)
    bar.emplace(std::cout, data.steps, dist::ProgressBar::stdout_is_terminal());
  std::map<std::string, double> sums;
  // Checkpoints are taken at the ends of epochs: a resumed run starts its epoch afresh, and
  // the augmentation (keyed on the epoch) and dropout (a counter in the checkpoint) repeat.
  for (const auto& batch : data.train.iterator(epoch)) {
    auto per_replica =
        strategy.run([&](const Element& b) { return gan.train_step(b[0], b[1]); }, batch);
    add_reduced(strategy, per_replica, sums);
    ++step;
    ++taken;
    if (bar) bar->update(taken, format_losses(divided(sums, taken)));
    if (o.kill_at_step == step) std::raise(SIGKILL);  // the resume test's machine failure
  }
  if (bar) bar->finish();
  // Without a bar, the epoch's mean losses on one line.
  if (strategy.is_chief() && !bar) std::cout << format_losses(divided(sums, taken)) << "\n";
  return sums;
}

// The mean cycle and identity errors over the test batches.
std::map<std::string, double> test_errors(const dist::Strategy& strategy,
                                          dist::models::CycleGan& gan, const Data& data,
                                          int64_t epoch) {
  std::map<std::string, double> errors;
  int64_t test_steps = 0;
  for (const auto& batch : data.test.iterator(epoch)) {
    auto per_replica =
        strategy.run([&](const Element& b) { return gan.test_step(b[0], b[1]); }, batch);
    add_reduced(strategy, per_replica, errors);
    ++test_steps;
  }
  return divided(errors, test_steps);
}

// The chief's record of an epoch: the errors and time printed, TensorBoard scalars and grids,
// and the picture of the translations in OUT/images.
void report_epoch(dist::SummaryWriter& summaries, dist::models::CycleGan& gan, const Data& data,
                  const Options& o, int64_t epoch, int64_t step, double seconds,
                  const std::map<std::string, double>& losses,
                  std::map<std::string, double> errors) {
  std::printf("MAE(X, F(G(X))): %.4f MAE(X, F(X)): %.4f\n", errors["MAE(X, F(G(X)))"],
              errors["MAE(X, F(X))"]);
  std::printf("MAE(Y, G(F(Y))): %.4f MAE(Y, G(Y)): %.4f\n", errors["MAE(Y, G(F(Y)))"],
              errors["MAE(Y, G(Y))"]);
  std::printf("Elapse: %.2fs\n", seconds);
  for (const auto& [key, mean] : losses) summaries.scalar(key, mean, step);
  for (const auto& [key, value] : errors) summaries.scalar("test/" + key, value, step);
  at::Tensor x_grid = translation_grid(gan.generator_g, gan.generator_f, data.plot_x);
  at::Tensor y_grid = translation_grid(gan.generator_f, gan.generator_g, data.plot_y);
  summaries.image("X -> Y -> X", dist::to_uint8_image(x_grid, -1, 1), step);
  summaries.image("Y -> X -> Y", dist::to_uint8_image(y_grid, -1, 1), step);
  summaries.flush();
  char name[64];
  std::snprintf(name, sizeof(name), "/images/epoch_%03lld.png", static_cast<long long>(epoch + 1));
  dist::write_png(o.out + name,
                  dist::to_uint8_image(dist::image_grid({x_grid, y_grid}, 1, 2, 1.0), -1, 1));
  std::cout << std::flush;
}

int train(const Options& o) {
  dist::Strategy strategy = make_strategy(o.strategy);
  const bool chief = strategy.is_chief();
  const int64_t replicas = strategy.num_replicas_in_sync();
  if (chief) std::cout << "Number of devices: " << replicas << "\n";
  const Data data = make_data(strategy, o, o.batch_per_replica * replicas);
  dist::models::CycleGan gan = make_gan(strategy, o);

  dist::Checkpoint checkpoint;
  gan.add_to(checkpoint);
  dist::CheckpointManager manager(o.out + "/ckpts", /*max_to_keep=*/3);
  if (auto latest = manager.latest()) {
    checkpoint.read(*latest);  // every worker reads it (one host, or a shared file system)
    if (chief)
      std::cout << "resumed from " << *latest << " at step " << checkpoint.state.step << "\n";
  }
  std::optional<dist::SummaryWriter> summaries;
  if (chief) {
    summaries.emplace(o.out + "/logs");
    std::filesystem::create_directories(o.out + "/images");
  }
  int64_t step = checkpoint.state.step;
  for (int64_t epoch = checkpoint.state.epoch; epoch < o.epochs; ++epoch) {
    if (chief) std::cout << "Epoch " << epoch + 1 << "/" << o.epochs << "\n";
    const auto start = std::chrono::steady_clock::now();
    int64_t taken = 0;
    const auto sums = train_epoch(strategy, gan, data, o, epoch, step, taken);
    const auto errors = test_errors(strategy, gan, data, epoch);
    checkpoint.state.step = step;
    checkpoint.state.epoch = epoch + 1;
    checkpoint.state.position = {epoch + 1, 0};
    if (!chief) continue;  // the chief writes the checkpoints, logs and pictures
    if ((epoch + 1) % o.checkpoint_every == 0 || epoch + 1 == o.epochs)
      std::cout << "saved " << manager.save(checkpoint) << "\n";
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report_epoch(*summaries, gan, data, o, epoch, step, seconds, divided(sums, taken), errors);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "CycleGAN on Fashion-MNIST (sneakers <-> ankle boots) under a tf.distribute-style "
      "strategy"};
  app.add_option("--strategy", o.strategy,
                 "one_device, mirrored, central_storage or multi_worker_mirrored (TF_CONFIG)");
  app.add_option("--epochs", o.epochs, "epochs to train (in all, counting resumed ones)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", o.out, "directory for ckpts/, logs/ (TensorBoard) and images/");
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST IDX files");
  app.add_option("--batch-per-replica", o.batch_per_replica, "examples per replica per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "at most this many steps per epoch")
      ->check(CLI::PositiveNumber);
  app.add_option("--test-batches", o.test_batches, "global test batches for the errors")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-every", o.checkpoint_every, "epochs between checkpoints")
      ->check(CLI::PositiveNumber);
  app.add_option("--filters", o.filters, "filters of the first convolution of every model")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the weights, the augmentation and dropout");
  app.add_option("--kill-at-step", o.kill_at_step,
                 "for the resume test: SIGKILL this process after that global step");
  app.add_flag("!--no-progress", o.progress, "no progress bar");
  CLI11_PARSE(app, argc, argv);
  return examples::run_main(app.help(), [&] { return train(o); });
}
