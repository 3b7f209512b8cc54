// What DistributedDataset needs beyond shard_files (dist/data/files.h) to give a worker its
// part of a pipeline sharded by file.
#pragma once

#include "dist/data/dataset.h"

namespace dist::data::detail {

// The pipeline with its global batch (the batch() nearest the output) divided by the number
// of workers: each worker batches its own files. Throws InvalidArgument if it does not divide.
Dataset divide_global_batch(const Dataset& dataset, int64_t num_workers);

}  // namespace dist::data::detail
