// Image examples: tf.train.Example records of one image and its label, as
// write_image_tfrecords (dist/train/image_export.h) and TensorFlow's image datasets write them.
// The image is either encoded (PNG or JPEG, told by its first bytes) or raw pixels
// (ImageFormat::kRaw: "image/format" "raw", C x H x W bytes sized by "image/channels",
// "image/height" and "image/width").
//
//   const ImageExampleParser parser;  // "image/encoded", "image/class/label"
//   Element e = parser.parse(record, {3, 224, 224}, "record 12 of train-00003.tfrecord");
//   // e[0]: uint8 [3, 224, 224], e[1]: int64 []
#pragma once

#include <string>
#include <string_view>

#include "dist/data/element.h"
#include "dist/data/example.h"
#include "dist/data/image_codec.h"

namespace dist::data {

// The names of an image example's image and label features (the format and size features
// have the fixed names above).
struct ImageExampleFeatures {
  std::string image = "image/encoded";
  std::string label = "image/class/label";
};

// Parses image examples, each once: the image, label, format and size features together.
// Immutable after construction, so thread-safe to share.
class ImageExampleParser {
 public:
  explicit ImageExampleParser(const ImageExampleFeatures& features = {});

  // {image uint8 [C, H, W], label int64 []}, named by the two feature names. An encoded image
  // is decoded by decode_image with `options`; raw pixels get the same conversions (channels
  // as PIL's convert, size by resize_image). `source` names the record in errors, e.g.
  // "record 12 of shard-00003.tfrecord". DataError for a bad record (parse_example's errors),
  // an image decode_image refuses, or raw pixels that are not 1 or 3 channels of sizes above
  // 0 whose byte count is C x H x W; each message starts "<source>: " (decode_image's
  // "decode_image: <source>: "). InvalidArgument for options decode_image refuses.
  Element parse(std::string_view record, const DecodeImageOptions& options = {},
                const std::string& source = "") const;

 private:
  FeatureSpec spec_;
};

// The pixels of a raw image (uint8 [C * H * W] bytes) as [C, H, W], checked as
// ImageExampleParser::parse checks them and converted by `options` as decode_image converts.
at::Tensor raw_image(const at::Tensor& bytes, int64_t channels, int64_t height, int64_t width,
                     const DecodeImageOptions& options = {}, const std::string& source = "");

}  // namespace dist::data
