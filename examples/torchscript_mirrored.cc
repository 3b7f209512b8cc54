// A model from Python trained in C++: a TorchScript classifier (torch.jit.script or
// torch.jit.trace in Python, saved with torch.jit.save) trained under MirroredStrategy, 2
// replicas, on Fashion-MNIST with a custom loop, then written back for Python
// (dist/models/torchscript_model.h; docs/guide.md, "Models from Python").
//
//   torchscript_mirrored MODEL.pt OUT_DIR [STEPS=300] [TEST_IMAGES=10000] [BATCH=64]
//
//   MODEL.pt     forward takes float N x 1 x 28 x 28 images in [0, 1] and returns N x 10
//                logits; examples/python/make_torchscript_models.py writes cnn_scripted.pt,
//                cnn_traced.pt, resnet18.pt and tutorial_cnn.pt. `cpp:tutorial_cnn` instead
//                trains the tutorial CNN written in C++ (dist::models::make_tutorial_cnn), the
//                twin of tutorial_cnn.pt, in the same loop (bench/compare_torchscript.sh times
//                the two), and writes nothing.
//   STEPS        training steps of 2 x BATCH images (Adam 1e-3); the first 10 warm up, the
//                rest are timed (images/s)
//   TEST_IMAGES  the first this many Fashion-MNIST test images measure the accuracy
//   BATCH        images per replica and step
//
// Writes into OUT_DIR, for Python:
//   trained.pt            the trained module in evaluation mode: torch.jit.load reads it
//   trained.safetensors   its parameters and buffers under the names of its state_dict
//   test_images.f32       the test images it was evaluated on, raw float32 N x 1 x 28 x 28
//   test_labels.i64       their labels, raw int64
//   test_logits.f32       what it computed on them, raw float32 N x 10
// so that Python gives the same accuracy (one command line):
//   /usr/bin/python3 examples/python/evaluate_torchscript.py OUT_DIR/trained.pt
//       OUT_DIR/test_images.f32 --labels OUT_DIR/test_labels.i64
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/data/mnist.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/models/torchscript_model.h"
#include "dist/train/loss.h"
#include "example_args.h"

namespace {

constexpr const char* kUsage =
    "torchscript_mirrored MODEL.pt|cpp:tutorial_cnn OUT_DIR [STEPS=300] [TEST_IMAGES=10000] "
    "[BATCH=64]";
constexpr const char* kCppModel = "cpp:tutorial_cnn";
constexpr int64_t kWarmUpSteps = 10;

struct Args {
  std::string model;
  std::string out_dir;
  int64_t steps = 300;
  int64_t test_images = 10000;
  int64_t batch = 64;
};

Args parse_args(int argc, char** argv) {
  if (argc < 3) throw examples::UsageError("MODEL.pt and OUT_DIR are required");
  if (argc > 6) throw examples::UsageError("too many arguments");
  Args args;
  args.model = argv[1];
  args.out_dir = argv[2];
  if (argc > 3) args.steps = examples::parse_int(argv[3], "STEPS", 1);
  if (argc > 4) args.test_images = examples::parse_int(argv[4], "TEST_IMAGES", 1);
  if (argc > 5) args.batch = examples::parse_int(argv[5], "BATCH", 1);
  return args;
}

void write_raw(const std::string& path, const at::Tensor& tensor) {
  const at::Tensor values = tensor.contiguous();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(values.data_ptr()),
            static_cast<std::streamsize>(values.nbytes()));
  if (!out.flush()) throw std::runtime_error("cannot write '" + path + "'");
}

// Trains `model` for args.steps steps on shuffled Fashion-MNIST (each replica BATCH images a
// step), printing the loss every 50 steps and the speed of the steps after the warm-up.
template <class M>
void train(const dist::Strategy& strategy, dist::Mirrored<M>& model, const Args& args) {
  const int64_t global_batch = args.batch * strategy.num_replicas_in_sync();
  auto train_data = strategy.experimental_distribute_dataset(
      dist::data::fashion_mnist_bytes(dist::data::kFashionMnistDefaultDir,
                                      dist::data::Split::kTrain)
          .shuffle(60000, /*seed=*/1)
          .batch(global_batch, /*drop_remainder=*/true)
          .map(dist::data::scale_images_of)
          .repeat()
          .prefetch());
  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(1e-3));
  dist::SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, dist::Reduction::kNone);
  model.train();
  auto timed_from = std::chrono::steady_clock::now();
  int64_t step = 0;
  for (const auto& batch : train_data.iterator()) {
    auto losses = strategy.run(
        [&](const dist::data::Element& b) {
          auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
          loss.backward();
          optimizer->apply_gradients();  // all-reduce, then one identical update
          return loss.detach();
        },
        batch);
    ++step;
    if (step % 50 == 0 || step == args.steps)
      std::cout << "step " << step << ": loss "
                << strategy.reduce(dist::ReduceOp::kSum, losses).template item<double>()
                << std::endl;
    if (step == kWarmUpSteps) timed_from = std::chrono::steady_clock::now();
    if (step == args.steps) break;
  }
  if (args.steps > kWarmUpSteps) {
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - timed_from;
    const int64_t timed = args.steps - kWarmUpSteps;
    std::printf("Trained %lld steps of %lld images: %.1f images/s (steps %lld to %lld)\n",
                static_cast<long long>(args.steps), static_cast<long long>(global_batch),
                static_cast<double>(timed * global_batch) / took.count(),
                static_cast<long long>(kWarmUpSteps + 1), static_cast<long long>(args.steps));
  }
}

// The logits of `model` on `images` in evaluation mode, 500 images at a time.
template <class M>
at::Tensor evaluate(M model, const at::Tensor& images) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<at::Tensor> logits;
  for (int64_t start = 0; start < images.size(0); start += 500)
    logits.push_back(model->forward(images.slice(0, start, std::min(images.size(0), start + 500))));
  return torch::cat(logits);
}

void report_accuracy(const at::Tensor& logits, const at::Tensor& labels) {
  const int64_t correct = logits.argmax(1).eq(labels).sum().item<int64_t>();
  std::printf("Test accuracy %.4f (%lld of %lld images)\n",
              static_cast<double>(correct) / static_cast<double>(labels.size(0)),
              static_cast<long long>(correct), static_cast<long long>(labels.size(0)));
}

int run(const Args& args) {
  dist::MirroredOptions options;
  options.devices = {"cpu:0", "cpu:1"};  // 2 replicas, one intra-op thread each on 2 cores
  dist::MirroredStrategy strategy(options);
  auto test =
      dist::data::load_mnist_format(dist::data::kFashionMnistDefaultDir, dist::data::Split::kTest);
  const int64_t n = std::min(args.test_images, test.images.size(0));
  const at::Tensor images = test.images.slice(0, 0, n);
  const at::Tensor labels = test.labels.slice(0, 0, n);

  if (args.model == kCppModel) {  // the comparison: the same loop on the C++ twin
    auto model = strategy.mirror(dist::models::make_tutorial_cnn());
    train(strategy, model, args);
    report_accuracy(evaluate(model.primary(), images), labels);
    return 0;
  }

  // Checked before anything trains: the file, then one forward on a batch of test images.
  dist::models::TorchScriptModule script = dist::models::load_torchscript(args.model);
  dist::models::check_classifier_forward(*script, images.slice(0, 0, args.batch), 10);
  std::filesystem::create_directories(args.out_dir);
  auto model = strategy.mirror(script);  // one copy per replica; the parameters are variables
  std::cout << "Training " << args.model << " (" << model.variables().trainable_variables().size()
            << " parameter tensors) on " << strategy.num_replicas_in_sync() << " replicas"
            << std::endl;
  train(strategy, model, args);

  const dist::models::TorchScriptModule& trained = model.primary();  // the current values
  const at::Tensor logits = evaluate(trained, images);
  report_accuracy(logits, labels);
  const std::string out = args.out_dir + "/";
  dist::models::save_torchscript(*trained, out + "trained.pt");  // in evaluation mode
  dist::models::save_torchscript_weights(*trained, out + "trained.safetensors");
  write_raw(out + "test_images.f32", images);
  write_raw(out + "test_labels.i64", labels);
  write_raw(out + "test_logits.f32", logits);
  std::cout << "Wrote " << out << "trained.pt and " << out
            << "trained.safetensors; in Python:\n  /usr/bin/python3 "
               "examples/python/evaluate_torchscript.py "
            << out << "trained.pt " << out << "test_images.f32 --labels " << out
            << "test_labels.i64" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main(kUsage, [&] { return run(parse_args(argc, argv)); });
}
