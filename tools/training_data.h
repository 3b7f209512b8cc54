// dist-train's input: Fashion-MNIST from its IDX files (the default), or a user's files
// (--train-data / --test-data: TFRecord shards of tf.train.Example or an image folder), as
// datasets of global batches of {float image [1, H, W] in [0, 1], int64 label}.
#pragma once

#include <memory>
#include <string>

#include "dist/data/dataset.h"
#include "dist/data/ignored_errors.h"
#include "train_options.h"

namespace dist::tools {

struct TrainingData {
  data::Dataset train;  // shuffled global batches
  data::Dataset test;   // global batches in order
  int64_t num_train = 0;
  std::string description;  // "Fashion-MNIST (IDX)" or the specs, for the job's header
  // The records and images skipped under --ignore-errors (null without it).
  std::shared_ptr<data::IgnoredErrors> ignored;
};

// Opens the data the options name, batched by `global_batch` and sharded as --auto-shard says
// (the datasets carry the policy: Dataset::with_options). Checks, before any training, that
// the files exist and that the first image has a shape the model takes (InvalidArgument
// naming the flag otherwise), and that under kFile each of the `workers` has files of its own.
// `elastic`: a resize may come, which kFile cannot follow (refused; --auto-shard auto then
// shards by data).
TrainingData open_training_data(const TrainOptions& options, int64_t global_batch, int workers,
                                bool elastic);

}  // namespace dist::tools
