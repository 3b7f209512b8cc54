// dist-train's input: Fashion-MNIST from its IDX files (the default), or a user's files
// (--train-data / --test-data: TFRecord shards of tf.train.Example or an image folder), as
// datasets of global batches of {float image [C, H, W], int64 label}: each image decoded,
// converted, sized, augmented and normalized as the image flags say (image_preparation.h).
// With --features, of {the features joined [F], the label} instead (feature_data.h).
//
// The job looks at the data in two steps: inspect_training_data reads what the data holds (its
// first image, its classes) so that the model can be made for it (and --model-file's channels
// found), then open_training_data builds the pipelines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data_shape.h"
#include "dist/data/dataset.h"
#include "dist/data/ignored_errors.h"
#include "image_preparation.h"
#include "train_options.h"

namespace dist::tools {

// The first training image and the classes. Checks, before any training, that the files exist
// and hold examples (DataError, exit 3, otherwise), that the test data's labels are classes of
// the training data (an image folder's class folders the same, a TFRecord label below the
// classes), naming the flag. Counting a TFRecord's classes reads the labels of every record
// once (of --train-data and --test-data), unless --num-classes gives them.
DataShape inspect_training_data(const TrainOptions& options);

// Opens the data the options name, each image made ready by `prepare` and its label checked
// against `shape`'s classes (DataError naming the file and record), batched by
// `global_batch` and sharded as --auto-shard says (the datasets carry the policy:
// Dataset::with_options). Under kFile each of the `workers` must have files of its own
// (InvalidArgument naming the flag). `elastic`: a resize may come, which kFile cannot follow
// (refused; --auto-shard auto then shards by data).
TrainingData open_training_data(const TrainOptions& options, const ImagePreparation& prepare,
                                const DataShape& shape, int64_t global_batch, int workers,
                                bool elastic);

}  // namespace dist::tools
