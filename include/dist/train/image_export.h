// Writing a dataset of images to files a pipeline reads back: TFRecord shards of
// tf.train.Example (the features TensorFlow's image datasets use) or an image folder. For
// converting a data set, and for tests and benchmarks that need real files. In the train layer:
// it encodes PNGs with data::encode_png (dist/data/image_codec.h).
//
//   write_image_tfrecords(data::fashion_mnist_bytes(dir, data::Split::kTrain), "/data/train", 8);
//   // /data/train-00000-of-00008.tfrecord ... /data/train-00007-of-00008.tfrecord
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/data/dataset.h"
#include "dist/data/tfrecord.h"

namespace dist {

// kRaw: the pixels as they are (C x H x W bytes, "image/format" "raw", with "image/channels"),
// no decoding at all: the baseline a pipeline's decoding is measured against.
enum class ImageFormat { kPng, kJpeg, kRaw };

struct ImageExportOptions {
  ImageFormat format = ImageFormat::kPng;
  int jpeg_quality = 95;
  data::Compression compression = data::Compression::kNone;  // TFRecord files only
  // Called after every 1000 examples written and at the end, with the count so far.
  std::function<void(int64_t written)> progress;
};

// Writes the elements {image uint8 [C, H, W] or [H, W], label int64 scalar} as `shards`
// TFRecord files "<prefix>-0000i-of-0000N.tfrecord", consecutive examples in each (shard i
// holds examples [i n / N, (i + 1) n / N)), so reading the shards in order gives the dataset's
// order. Each record is a tf.train.Example with "image/encoded" (the PNG or JPEG bytes),
// "image/format" ("png" or "jpeg"), "image/class/label", "image/height" and "image/width".
// Every file is written whole or not at all (TFRecordWriter). Returns the files' paths.
// The dataset's cardinality must be known.
std::vector<std::string> write_image_tfrecords(const data::Dataset& examples,
                                               const std::string& prefix, int64_t shards,
                                               const ImageExportOptions& options = {});

// Writes the same elements as an image folder: directory/<label>/<index>.<png|jpg>, the label
// and index zero-padded so that sorted names keep the numeric order (the index is the
// element's place in the dataset). Each image file is written atomically. Returns the number
// of images written.
int64_t write_image_folder(const data::Dataset& examples, const std::string& directory,
                           const ImageExportOptions& options = {});

}  // namespace dist
