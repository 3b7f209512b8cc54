// The 224x224 RGB JPEG training pipeline of issue 69 (item 6), no training: images/s of
//
//   pipeline DIR   image_folder_files(DIR) -> decode_image to RGB uint8 -> random_resized_crop
//                  to 224x224 (antialiased) -> random_flip_left_right -> normalize (ImageNet's
//                  mean and std, float32) -> batch(64), the per-image work on --threads threads
//                  (MapOptions::num_parallel_calls); torchvision's RandomResizedCrop(224),
//                  RandomHorizontalFlip(), ToTensor(), Normalize(...) (bench/
//                  pytorch_jpeg_pipeline.py)
//   decode1 DIR    the decode-only rate: the folder's files read into memory first, then
//                  decode_image to RGB on this one thread (libjpeg-turbo's rate on one core)
//   stages1 DIR    where the time goes: the same work as `pipeline` on this one thread over
//                  the files in memory, each stage timed apart, in microseconds per image
//
// Every mode prints one line "<mode>: <n> images in <s> s: <rate> images/s" (stages1 adds its
// stages). Run by bench/jpeg_pipeline.sh.
//
//   build/bench/jpeg_pipeline_bench pipeline /tmp/jpegs [--threads 2] [--batch 64] [--epochs 2]
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "dist/data/image_codec.h"
#include "dist/data/image_folder.h"
#include "dist/data/image_transforms.h"

namespace {

using dist::data::Dataset;
using dist::data::Element;
using dist::data::ElementContext;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSize = 224;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

dist::data::ElementTransform augmentation() {
  using namespace dist::data;
  return compose({random_resized_crop(/*seed=*/1, kSize, kSize), random_flip_left_right(2),
                  normalize(kImageNetMean, kImageNetStd)});
}

Dataset pipeline(const std::string& dir, int64_t threads) {
  const auto augment = augmentation();
  return dist::data::image_folder_files(dir).map_with_context(
      [augment](Element e, const ElementContext& context) {
        Element image{dist::data::decode_image(e[0], {3}), e[1]};
        return augment(std::move(image), context);
      },
      {threads});
}

std::vector<at::Tensor> read_all(const std::string& dir, int64_t limit) {
  std::vector<at::Tensor> encoded;
  for (const Element& e : dist::data::image_folder_files(dir).iterator()) {
    encoded.push_back(e[0]);
    if (limit > 0 && static_cast<int64_t>(encoded.size()) == limit) break;
  }
  return encoded;
}

void decode_one_thread(const std::vector<at::Tensor>& encoded, int64_t epochs) {
  const auto start = Clock::now();
  int64_t n = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch)
    for (const at::Tensor& bytes : encoded) n += dist::data::decode_image(bytes, {3}).size(0) / 3;
  const double s = seconds_since(start);
  std::printf("decode1: %lld images in %.3f s: %.0f images/s\n", static_cast<long long>(n), s,
              static_cast<double>(n) / s);
}

// Each stage of the pipeline timed on its own, on this thread.
void stages_one_thread(const std::vector<at::Tensor>& encoded, int64_t epochs) {
  using namespace dist::data;
  const auto crop = random_resized_crop(1, kSize, kSize);
  const auto flip = random_flip_left_right(2);
  const auto norm = normalize(kImageNetMean, kImageNetStd);
  double t_decode = 0, t_crop = 0, t_flip = 0, t_normalize = 0;
  int64_t n = 0;
  const at::Tensor label = at::scalar_tensor(0, at::kLong);
  for (int64_t epoch = 0; epoch < epochs; ++epoch)
    for (size_t i = 0; i < encoded.size(); ++i) {
      const ElementContext context{epoch, static_cast<int64_t>(i)};
      auto t0 = Clock::now();
      Element e{decode_image(encoded[i], {3}), label};
      auto t1 = Clock::now();
      e = crop(std::move(e), context);
      auto t2 = Clock::now();
      e = flip(std::move(e), context);
      auto t3 = Clock::now();
      e = norm(std::move(e), context);
      auto t4 = Clock::now();
      using us = std::chrono::duration<double, std::micro>;
      t_decode += us(t1 - t0).count();
      t_crop += us(t2 - t1).count();
      t_flip += us(t3 - t2).count();
      t_normalize += us(t4 - t3).count();
      ++n;
    }
  const double total = t_decode + t_crop + t_flip + t_normalize;
  std::printf(
      "stages1: %lld images in %.3f s: %.0f images/s; us per image: decode %.0f, "
      "random_resized_crop %.0f, flip %.0f, normalize %.0f\n",
      static_cast<long long>(n), total / 1e6, static_cast<double>(n) / (total / 1e6), t_decode / n,
      t_crop / n, t_flip / n, t_normalize / n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Images/s of the 224x224 RGB JPEG training pipeline (no training)");
  std::string mode, source;
  int64_t threads = 2, batch = 64, limit = 0, epochs = 1;
  app.add_option("mode", mode, "pipeline | decode1 | stages1")
      ->required()
      ->check(CLI::IsMember({"pipeline", "decode1", "stages1"}));
  app.add_option("source", source, "the image folder (class sub-folders of JPEGs)")->required();
  app.add_option("--threads", threads, "threads of the per-image work")->capture_default_str();
  app.add_option("--batch", batch, "images per batch")->capture_default_str();
  app.add_option("--limit", limit, "only the first N images (0: all)")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the images")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // ATen's own threads stay out of it: the pipeline's threads are the parallelism measured.
  at::set_num_threads(1);
  try {
    if (mode != "pipeline") {
      const auto encoded = read_all(source, limit);
      if (mode == "decode1") decode_one_thread(encoded, epochs);
      if (mode == "stages1") stages_one_thread(encoded, epochs);
      return 0;
    }
    Dataset images = pipeline(source, threads);
    if (limit > 0) images = images.take(limit);
    const Dataset batches = images.batch(batch);
    const auto start = Clock::now();
    int64_t n = 0;
    double checksum = 0;
    for (int64_t epoch = 0; epoch < epochs; ++epoch)
      for (const Element& b : batches.iterator(epoch)) {
        n += b[0].size(0);
        checksum += b[0][0][0][112][112].item<float>();  // touch the batch
      }
    const double s = seconds_since(start);
    std::printf("pipeline: %lld images in %.3f s: %.0f images/s (checksum %.3f)\n",
                static_cast<long long>(n), s, static_cast<double>(n) / s, checksum);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "jpeg_pipeline_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
