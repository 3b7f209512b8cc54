// A user's folder of images as it comes: colour or grey, any size, any number of classes (one
// sub-folder per class, as Keras' image_dataset_from_directory and torchvision's ImageFolder
// read it), trained under MirroredStrategy with torchvision's recipe: RandomResizedCrop,
// RandomHorizontalFlip and Normalize for training; Resize and Normalize for evaluation, which
// runs inside the loop after every epoch. The model is a TorchScript module from Python
// (MODEL.pt, written back to OUT.pt), or the built-in CNN built for the images and classes.
//
//   colour_images TRAIN_DIR TEST_DIR [EPOCHS=10] [SIZE=64] [MODEL.pt] [OUT.pt]
//
// docs/guide.md ("Images") walks through it; tests/data/colour_images_example_test.cc runs it
// and has Python read OUT.pt back to the test accuracy printed here.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>
#include <string>

#include "dist/data/image_codec.h"
#include "dist/data/image_folder.h"
#include "dist/data/image_transforms.h"
#include "dist/distribute/mirrored_strategy.h"
#include "dist/models/reference_models.h"
#include "dist/models/torchscript_model.h"
#include "dist/train/loss.h"
#include "dist/train/metrics.h"

namespace data = dist::data;

struct Job {
  std::string train_dir, test_dir, out;
  int epochs = 10;
  int64_t size = 64;
};

// Training: decoded to RGB (grey, RGBA, palette, CMYK and 16-bit images converted) on every
// hardware thread, then transformed: each random choice is a function of (seed, epoch, the
// image's place in the epoch), so any number of replicas trains on one device's batches.
data::Dataset training_images(const Job& job, int64_t global_batch) {
  const auto decode = [](data::Element e) {
    return data::Element{data::decode_image(e[0], {/*channels=*/3}), e[1]};
  };
  const data::MapOptions threads{data::kAutotune};
  return data::image_folder_files(job.train_dir, {/*shuffle=*/true, /*seed=*/3})
      .map(decode, threads)
      .map_with_context(data::compose({data::random_resized_crop(/*seed=*/1, job.size, job.size),
                                       data::random_flip_left_right(/*seed=*/2),
                                       data::normalize(data::kImageNetMean, data::kImageNetStd)}),
                        threads)
      .batch(global_batch)
      .prefetch(2);
}

// Evaluation: every image resized to SIZE x SIZE (antialiased, as PIL and torchvision).
data::Dataset test_images(const Job& job, int64_t global_batch) {
  return data::image_folder(job.test_dir, {/*channels=*/3}, {}, data::kAutotune)
      .map_with_context(data::compose({data::resize(job.size, job.size),
                                       data::normalize(data::kImageNetMean, data::kImageNetStd)}))
      .batch(global_batch);
}

// The custom loop, the same for any module type M.
template <class M>
void train(dist::MirroredStrategy& strategy, dist::Mirrored<M> model, const Job& job) {
  const int64_t global_batch = 16 * strategy.num_replicas_in_sync();
  auto train = strategy.experimental_distribute_dataset(training_images(job, global_batch));
  auto test = test_images(job, global_batch);

  auto optimizer =
      strategy.mirror_optimizer<torch::optim::Adam>(model, torch::optim::AdamOptions(3e-3));
  dist::SparseCategoricalCrossentropy loss_fn(/*from_logits=*/true, dist::Reduction::kNone);
  dist::metrics::SparseCategoricalAccuracy accuracy("accuracy"), test_accuracy("test_accuracy");
  for (int epoch = 0; epoch < job.epochs; ++epoch) {
    model.train();
    double total_loss = 0;
    int64_t batches = 0;
    for (const auto& batch : train.iterator(epoch)) {
      auto losses = strategy.run(
          [&](const data::Element& b) {
            auto logits = model->forward(b[0]);
            auto loss = dist::compute_average_loss(loss_fn(b[1], logits));  // / global batch
            loss.backward();
            optimizer->apply_gradients();
            accuracy.update_state(b[1], logits.detach());
            return loss.detach();
          },
          batch);
      total_loss += strategy.reduce(dist::ReduceOp::kSum, losses).template item<double>();
      ++batches;
    }
    // Evaluation inside the loop: the primary module holds the current weights after a step.
    model.eval();
    {
      torch::NoGradGuard no_grad;
      for (const auto& b : test.iterator())
        test_accuracy.update_state(b[1], model.primary()->forward(b[0]));
    }
    std::cout << "epoch " << epoch + 1 << ": loss " << std::fixed << std::setprecision(4)
              << total_loss / batches << ", accuracy " << accuracy.result() << ", test accuracy "
              << test_accuracy.result() << std::endl;
    accuracy.reset_state();
    if (epoch + 1 < job.epochs) test_accuracy.reset_state();
  }
  std::cout << "{\"test_accuracy\":" << std::setprecision(17) << test_accuracy.result() << "}"
            << std::endl;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0]
              << " TRAIN_DIR TEST_DIR [EPOCHS=10] [SIZE=64] [MODEL.pt] [OUT.pt]\n";
    return 2;
  }
  Job job{argv[1], argv[2], argc > 6 ? argv[6] : ""};
  if (argc > 3) job.epochs = std::stoi(argv[3]);
  if (argc > 4) job.size = std::stoll(argv[4]);
  const std::string model_file = argc > 5 ? argv[5] : "";

  dist::MirroredStrategy strategy;  // one replica per core; each gets its share of the cores
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << std::endl;
  if (model_file.empty()) {
    const int64_t classes = static_cast<int64_t>(data::image_folder_classes(job.train_dir).size());
    torch::manual_seed(0);
    train(strategy,
          strategy.mirror(dist::models::make_tutorial_cnn({3, job.size, job.size, classes})), job);
    return 0;
  }
  auto model = strategy.mirror(dist::models::load_torchscript(model_file));
  train(strategy, model, job);
  if (!job.out.empty()) dist::models::save_torchscript(*model.primary(), job.out);
  return 0;
}
