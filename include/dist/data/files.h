// Files as the input of a pipeline: matching file names, datasets of them, and sharding a
// pipeline by its files (AutoShardPolicy::kFile).
//
//   // Each worker reads its own shards, four at a time:
//   auto shards = list_files("/data/train-*.tfrecord", /*shuffle=*/true, /*seed=*/7)
//                     .shard(context.num_input_pipelines, context.input_pipeline_id);
//   auto records = shards.interleave(
//       [](const Element& f) { return tfrecord_dataset({string_of(f[0])}); }, {4, 1});
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dist/core/env.h"
#include "dist/data/dataset.h"

namespace dist::data {

// The files matching a glob pattern (POSIX glob: *, ?, [...]), sorted by name, found through
// `env` (env.h: its directory listings). Throws DataError naming the pattern when nothing
// matches or a directory on the way cannot be listed, and naming the file when a match is not
// a regular file (a directory, a FIFO, a device: such a "file" would fail or block later) or
// vanished since the listing.
std::vector<std::string> match_files(const std::string& pattern, Env* env = Env::Default());
// The same for several patterns: their matches together, sorted, each file once.
std::vector<std::string> match_files(const std::vector<std::string>& patterns,
                                     Env* env = Env::Default());

// A dataset of file names, one element {name} per matching file, where name is a uint8 tensor
// of the path's bytes (string_of gives it back). The list is taken once, when the dataset is
// made. With shuffle, every epoch lists the files in another order, a function of (seed,
// epoch). A file source: AutoShardPolicy::kFile gives each worker every N-th of these files.
//
// One rule for every file source (list_files, tfrecord_dataset's shuffle_files, image_folder's
// shuffle): files are read in name order unless shuffling is asked for, and a shuffled order is
// a function of (seed, epoch) alone. (tf.data's list_files shuffles by default; here no source
// does, so that a pipeline without a seed is reproducible.)
Dataset list_files(const std::string& pattern, bool shuffle = false, uint64_t seed = 0,
                   Env* env = Env::Default());
Dataset list_files(const std::vector<std::string>& patterns, bool shuffle = false,
                   uint64_t seed = 0, Env* env = Env::Default());

// Bytes in and out of elements (file names, records, encoded images, parse_example's bytes
// features): a 1-D uint8 tensor holding a copy of the bytes, and the bytes of a uint8 tensor
// (any shape, row-major; InvalidArgument for another dtype).
at::Tensor string_tensor(std::string_view text);
std::string string_of(const at::Tensor& bytes);
// The bytes of a contiguous 1-D uint8 CPU tensor without copying them: valid while the tensor
// lives (InvalidArgument for another tensor; string_of copies any).
std::string_view bytes_view(const at::Tensor& bytes);

// How many files the pipeline's file sources read (list_files, tfrecord_dataset,
// image_folder), or -1 when it reads none (its data comes from tensors or a generator).
int64_t source_file_count(const Dataset& dataset);

// The pipeline with each file source reading only its files index, index + num_shards, ...
// (AutoShardPolicy::kFile; for distribute_datasets_from_function, call it with the
// InputContext's num_input_pipelines and input_pipeline_id). Throws InvalidArgument when the
// pipeline reads no files, or when a source has fewer files than shards (naming both counts).
Dataset shard_files(const Dataset& dataset, int64_t num_shards, int64_t index);

}  // namespace dist::data
