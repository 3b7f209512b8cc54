// dist-train's non-image input (--features): TFRecord features, each a float or int64 list of
// one length in every record, joined in the flag's order into one row per example, and the
// label (--label-feature): an int64 class (--task classify) or float values (--task regress;
// int64 values are taken as floats). Batches are {row [B, F], label [B] or [B, T]}: float32
// rows, or int64 when every feature is int64 (token ids for a --model-file); for a built-in
// model, which takes C x H x W, the rows are [B, 1, 1, F].
#pragma once

#include <cstdint>

#include "data_shape.h"
#include "train_options.h"

namespace dist::tools {

// The columns (type and length from the first record of --train-data), the first row, the
// targets (regress) or classes (classify, as inspect_training_data counts them). DataError
// naming the flag, the feature, the record and its file: a feature missing (with the names the
// record has), of bytes, or empty; a label that is not one int64 (classify).
void inspect_features(const TrainOptions& options, DataShape& shape);

// The datasets of global batches, shuffled and sharded as for images (training_data.h). A
// record whose feature has another length than the first's, or whose label is out of range,
// is a DataError naming the record (skipped under --ignore-errors).
TrainingData open_feature_data(const TrainOptions& options, const DataShape& shape,
                               int64_t global_batch, int workers, bool elastic);

}  // namespace dist::tools
