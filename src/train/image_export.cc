#include "dist/train/image_export.h"

#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
#include "dist/core/error.h"
#include "dist/data/example.h"
#include "dist/data/image_codec.h"
#include "dist/train/image_io.h"

namespace dist {
namespace {

std::string encode(const at::Tensor& image, const ImageExportOptions& options) {
  switch (options.format) {
    case ImageFormat::kPng:
      return data::encode_png(image);
    case ImageFormat::kJpeg:
      return data::encode_jpeg(image, options.jpeg_quality);
    case ImageFormat::kRaw:
      break;
  }
  const at::Tensor pixels = image.contiguous();
  return std::string(reinterpret_cast<const char*>(pixels.data_ptr<uint8_t>()),
                     static_cast<size_t>(pixels.numel()));
}

const char* format_name(ImageFormat format) {
  return format == ImageFormat::kPng ? "png" : format == ImageFormat::kJpeg ? "jpeg" : "raw";
}

// "00042" for value 42 of a count needing 5 digits.
std::string padded(int64_t value, int digits) {
  std::string text = std::to_string(value);
  return std::string(static_cast<size_t>(std::max<int>(0, digits - static_cast<int>(text.size()))),
                     '0') +
         text;
}

void check_element(const data::Element& e, int64_t index) {
  DIST_CHECK_ARG(e.size() >= 2 && e[0].scalar_type() == at::kByte && e[1].numel() == 1,
                 "writing images: element ", index,
                 " is not {uint8 image, label}; map it to that first (the images as uint8 "
                 "pixels, the label as one integer)");
}

void report(const ImageExportOptions& options, int64_t written, bool last) {
  if (options.progress && (last || written % 1000 == 0)) options.progress(written);
}

}  // namespace

std::vector<std::string> write_image_tfrecords(const data::Dataset& examples,
                                               const std::string& prefix, int64_t shards,
                                               const ImageExportOptions& options) {
  DIST_CHECK_ARG(shards >= 1, "write_image_tfrecords: shards must be at least 1, got ", shards);
  const int64_t total = examples.cardinality();
  DIST_CHECK_ARG(total >= 0, "write_image_tfrecords needs a dataset of known size, got ",
                 examples.describe());
  const int digits = std::max<int>(5, static_cast<int>(std::to_string(shards).size()));
  std::vector<std::string> paths;
  auto it = examples.iterator();
  int64_t written = 0;
  for (int64_t shard = 0; shard < shards; ++shard) {
    paths.push_back(prefix + "-" + padded(shard, digits) + "-of-" + padded(shards, digits) +
                    ".tfrecord");
    data::TFRecordWriter out(paths.back(), options.compression);
    const int64_t end = (shard + 1) * total / shards;
    for (; written < end; ++written) {
      auto e = it.next();
      DIST_CHECK_ARG(e.has_value(), "write_image_tfrecords: ", examples.describe(), " ended after ",
                     written, " of the ", total, " elements its cardinality promised");
      check_element(*e, written);
      const at::Tensor& image = (*e)[0];
      data::ExampleBuilder example;
      example.add_bytes("image/encoded", encode(image, options));
      example.add_bytes("image/format", format_name(options.format));
      example.add_int64("image/channels", image.dim() == 3 ? image.size(0) : 1);
      example.add_int64("image/class/label", (*e)[1].item<int64_t>());
      example.add_int64("image/height", image.size(-2));
      example.add_int64("image/width", image.size(-1));
      out.write(example.serialize());
      report(options, written + 1, false);
    }
    out.close();
  }
  report(options, written, true);
  return paths;
}

int64_t write_image_folder(const data::Dataset& examples, const std::string& directory,
                           const ImageExportOptions& options) {
  namespace fs = std::filesystem;
  const int64_t total = examples.cardinality();
  const int digits = static_cast<int>(std::to_string(std::max<int64_t>(total, 99999)).size());
  DIST_CHECK_ARG(options.format != ImageFormat::kRaw,
                 "write_image_folder: an image folder holds PNG or JPEG files, not raw pixels");
  const char* extension = options.format == ImageFormat::kPng ? ".png" : ".jpg";
  int64_t written = 0;
  for (const data::Element& e : examples.iterator()) {
    check_element(e, written);
    const int64_t label = e[1].item<int64_t>();
    DIST_CHECK_ARG(label >= 0, "write_image_folder: element ", written, " has label ", label,
                   "; class folders are numbered from 0");
    const fs::path folder = fs::path(directory) / padded(label, 3);
    std::error_code error;
    fs::create_directories(folder, error);
    DIST_CHECK(!error, DataError, "write_image_folder: cannot create '", folder.string(),
               "': ", error.message());
    const std::string path = (folder / (padded(written, digits) + extension)).string();
    if (options.format == ImageFormat::kPng) {
      write_png(path, e[0]);
    } else {
      const std::string bytes = data::encode_jpeg(e[0], options.jpeg_quality);
      dist::detail::write_file_atomically(
          Env::Default(), path, "JPEG image",
          [&](WritableFile& file) { file.append(bytes.data(), bytes.size()); });
    }
    ++written;
    report(options, written, false);
  }
  report(options, written, true);
  return written;
}

}  // namespace dist
