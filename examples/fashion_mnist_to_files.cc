// Writes Fashion-MNIST as a user's data on disk would be: TFRecord shards of tf.train.Example
// (PNG- or JPEG-encoded images) and an image folder, each with a train and a test part, for
// dist-train --train-data / --test-data (examples/train_from_files.sh trains from both).
//
//   fashion_mnist_to_files OUT [--shards 8] [--format png|jpeg] [--repeat K] [--no-folder]
//
// OUT/tfrecord/train-0000i-of-00008.tfrecord, OUT/tfrecord/test-...; OUT/images/train/<class>/,
// OUT/images/test/<class>/. --repeat K writes the training set K times over (a data set K times
// as large, for measuring that memory does not grow with it).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "dist/data/mnist.h"
#include "dist/train/image_export.h"

int main(int argc, char** argv) {
  CLI::App app("Writes Fashion-MNIST as TFRecord shards and as an image folder");
  std::string out, format = "png", data_dir = dist::data::kFashionMnistDefaultDir;
  int64_t shards = 8, repeat = 1;
  bool no_folder = false;
  app.add_option("out", out, "output directory")->required();
  app.add_option("--shards", shards, "TFRecord files per split")->check(CLI::PositiveNumber);
  app.add_option("--format", format, "png | jpeg | raw (TFRecords of the pixels, no folder)")
      ->check(CLI::IsMember({"png", "jpeg", "raw"}));
  app.add_option("--repeat", repeat, "write the training set this many times over")
      ->check(CLI::PositiveNumber);
  app.add_option("--data-dir", data_dir, "Fashion-MNIST IDX files");
  app.add_flag("--no-folder", no_folder, "write the TFRecord shards only");
  CLI11_PARSE(app, argc, argv);
  try {
    namespace fs = std::filesystem;
    using namespace dist::data;
    using dist::ImageExportOptions, dist::ImageFormat;
    ImageExportOptions options;
    options.format = format == "png"    ? ImageFormat::kPng
                     : format == "jpeg" ? ImageFormat::kJpeg
                                        : ImageFormat::kRaw;
    if (options.format == ImageFormat::kRaw) no_folder = true;
    for (Split split : {Split::kTrain, Split::kTest}) {
      const std::string name = split == Split::kTrain ? "train" : "test";
      Dataset examples = fashion_mnist_bytes(data_dir, split);
      if (split == Split::kTrain && repeat > 1) examples = examples.repeat(repeat);
      const int64_t total = examples.cardinality();
      options.progress = [&](int64_t written) {
        std::cout << "\r" << name << ": " << written << " / " << total << std::flush;
      };
      fs::create_directories(fs::path(out) / "tfrecord");
      auto files = dist::write_image_tfrecords(
          examples, (fs::path(out) / "tfrecord" / name).string(), shards, options);
      std::cout << "\n"
                << name << ": " << files.size() << " TFRecord files in " << out << "/tfrecord"
                << std::endl;
      if (no_folder) continue;
      const int64_t images =
          dist::write_image_folder(examples, (fs::path(out) / "images" / name).string(), options);
      std::cout << "\n"
                << name << ": " << images << " images in " << out << "/images/" << name
                << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist_to_files: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
