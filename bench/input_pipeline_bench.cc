// The decode pipeline alone, no training: images/s of
//
//   images SOURCE = DIR     image_folder_files(DIR) -> decode to grey uint8 -> scale to float
//                           [0, 1] -> batch(64), the decoding on --threads threads
//   tfrecord SOURCE = GLOB  tfrecord_dataset(match_files(GLOB)) -> parse the tf.train.Example
//                           -> the same decode (PNG, JPEG; raw pixels only reshaped), scale
//                           and batch
//   decode1 SOURCE = DIR    the machine's limit: the image folder's files read into memory
//                           first, then decode_image on this one thread, no pipeline (the rate
//                           of libjpeg-turbo on one core for these images)
//
// The work per image is torchvision's ImageFolder + Grayscale + ToTensor (bench/
// pytorch_image_folder.py), and dist-train's decoding stage (tools/training_data.cc). Every
// run iterates --epochs passes over the source (or its first --limit images) in file order and
// prints one line "<mode>: <n> images in <s> s: <rate> images/s".
//
//   build/bench/input_pipeline_bench images /data/images/train [--threads 2] [--batch 64]
//   build/bench/input_pipeline_bench tfrecord '/data/tfrecord/train-*' [--limit 20000]
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/image_codec.h"
#include "dist/data/image_folder.h"
#include "dist/data/mnist.h"
#include "dist/data/tfrecord_dataset.h"

namespace {

using dist::data::Dataset;
using dist::data::Element;

// Decoded to grey uint8 [1, H, W], then scaled to float [0, 1]: torchvision's Grayscale +
// ToTensor.
Element decode_grey_scaled(const at::Tensor& encoded, const at::Tensor& label) {
  return {dist::data::scale_images(dist::data::decode_image(encoded, {1, 0, 0})), label};
}

Dataset folder_pipeline(const std::string& dir, int64_t threads) {
  return dist::data::image_folder_files(dir).map(
      [](Element e) { return decode_grey_scaled(e[0], e[1]); }, {threads});
}

// Records of PNG or JPEG images, or of raw pixels ("image/format" "raw", fashion_mnist_to_files
// --format raw), which are only reshaped and scaled.
Dataset tfrecord_pipeline(const std::string& glob, int64_t threads) {
  using namespace dist::data;
  const FeatureSpec spec(
      {FixedLenFeature("image/encoded", FeatureType::kBytes, {}),
       FixedLenFeature("image/class/label", FeatureType::kInt64, {}),
       FixedLenFeature("image/format", FeatureType::kBytes, {}, string_tensor("")),
       FixedLenFeature("image/height", FeatureType::kInt64, {}, at::scalar_tensor(0, at::kLong)),
       FixedLenFeature("image/width", FeatureType::kInt64, {}, at::scalar_tensor(0, at::kLong))});
  return tfrecord_dataset(match_files(glob))
      .map(
          [spec](Element e) {
            const Element parsed = parse_example(string_of(e[0]), spec);
            if (string_of(parsed[2]) == "raw")
              return Element{scale_images(parsed[0].reshape(
                                 {1, parsed[3].item<int64_t>(), parsed[4].item<int64_t>()})),
                             parsed[1]};
            return decode_grey_scaled(parsed[0], parsed[1]);
          },
          {threads});
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One thread decoding encoded images already in memory: no file reads, no pipeline.
void decode_one_thread(const std::string& dir, int64_t limit, int64_t epochs) {
  std::vector<std::string> encoded;
  auto files = dist::data::image_folder_files(dir);
  for (const Element& e : files.iterator()) {
    encoded.push_back(dist::data::string_of(e[0]));
    if (limit > 0 && static_cast<int64_t>(encoded.size()) == limit) break;
  }
  const auto start = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch)
    for (const std::string& bytes : encoded) {
      auto image = dist::data::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            bytes.size(), {1, 0, 0});
      n += image.size(0);
    }
  const double s = seconds_since(start);
  std::printf("decode1: %lld images in %.3f s: %.0f images/s\n", static_cast<long long>(n), s,
              n / s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Images/s of the decode pipeline alone (no training)");
  std::string mode, source;
  int64_t threads = 2, batch = 64, limit = 0, epochs = 1;
  app.add_option("mode", mode, "images | tfrecord | decode1")
      ->required()
      ->check(CLI::IsMember({"images", "tfrecord", "decode1"}));
  app.add_option("source", source, "the image folder (images, decode1) or a glob (tfrecord)")
      ->required();
  app.add_option("--threads", threads, "decoding threads (MapOptions::num_parallel_calls)")
      ->capture_default_str();
  app.add_option("--batch", batch, "images per batch")->capture_default_str();
  app.add_option("--limit", limit, "only the first N images (0: all)")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the images")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // ATen's own threads stay out of it: the decoding threads are the parallelism measured.
  at::set_num_threads(1);
  try {
    if (mode == "decode1") {
      decode_one_thread(source, limit, epochs);
      return 0;
    }
    Dataset images =
        mode == "images" ? folder_pipeline(source, threads) : tfrecord_pipeline(source, threads);
    if (limit > 0) images = images.take(limit);
    const Dataset batches = images.batch(batch);
    const auto start = std::chrono::steady_clock::now();
    int64_t n = 0;
    double checksum = 0;
    for (int64_t epoch = 0; epoch < epochs; ++epoch)
      for (const Element& b : batches.iterator(epoch)) {
        n += b[0].size(0);
        checksum += b[0][0][0][14][14].item<float>();  // touch the batch
      }
    const double s = seconds_since(start);
    std::printf("%s: %lld images in %.3f s: %.0f images/s (checksum %.3f)\n", mode.c_str(),
                static_cast<long long>(n), s, n / s, checksum);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "input_pipeline_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
