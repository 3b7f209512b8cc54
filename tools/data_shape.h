// What dist-train's input holds and what it opens as: the shape found before the job opens the
// data (training_data.h's inspect_training_data; feature_data.h for --features), and the
// datasets of global batches it trains and evaluates on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/data/dataset.h"
#include "dist/data/example.h"
#include "dist/data/ignored_errors.h"

namespace dist::tools {

// One of --features: a TFRecord feature of `length` numbers in every record.
struct FeatureColumn {
  std::string name;
  data::FeatureType type = data::FeatureType::kFloat;
  int64_t length = 0;
};

// What the training data holds, found before the job opens it.
struct DataShape {
  at::Tensor first;  // the first training image, uint8 [C, H, W] as stored (none: --features)
  // --features: the columns in the flag's order, and the first record's row of them joined
  // (float32, or int64 when every column is int64), for the model's start-up check.
  std::vector<FeatureColumn> features;
  at::Tensor first_row;
  // --task regress: the label's values per example, the model's outputs (0: classify).
  int64_t targets = 0;
  int64_t classes = 0;
  // Where `classes` came from, for the header and for messages: "--num-classes",
  // "the 5 class folders of images:/data/train", "the largest label (4) of --train-data + 1".
  std::string classes_source;

  bool has_features() const { return !features.empty(); }
  // The model's outputs per example: the targets, or the classes' logits.
  int64_t outputs() const { return targets > 0 ? targets : classes; }
  // The joined features per example (0 for images).
  int64_t row_length() const {
    int64_t length = 0;
    for (const FeatureColumn& c : features) length += c.length;
    return length;
  }
};

struct TrainingData {
  data::Dataset train;  // shuffled global batches
  data::Dataset test;   // global batches in order
  int64_t num_train = 0;
  std::string description;  // "Fashion-MNIST (IDX)" or the specs, for the job's header
  // How the files are divided between the workers ("" for Fashion-MNIST and one worker).
  std::string sharding;
  // The records and images skipped under --ignore-errors (null without it).
  std::shared_ptr<data::IgnoredErrors> ignored;
};

}  // namespace dist::tools
