// What dist-train's two kinds of input (images: training_data.h; features: feature_data.h)
// share: the data specs (--train-data tfrecord:GLOB | images:DIR), TFRecord files opened with
// their source attached, labels counted, and how the files are sharded between the workers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>

#include "dist/data/dataset.h"
#include "dist/data/ignored_errors.h"
#include "train_options.h"

namespace dist::tools {

struct DataSpec {
  enum class Kind { kTFRecord, kImages } kind;
  std::string location;  // the glob or the directory
};

// InvalidArgument naming `flag` unless `text` is tfrecord:GLOB or images:DIR.
DataSpec parse_spec(const std::string& flag, const std::string& text);

// --decode-threads, 0 resolved to the hardware threads.
int64_t decode_threads(const TrainOptions& options);

// Where an example came from, said only when something is wrong with it (building the text
// for every example would cost more than reading it).
struct ExampleSource {
  at::Tensor file;      // the file's path as bytes
  int64_t record = -1;  // the record's index in a TFRecord file; -1: the file is the image
  std::string operator()() const;
};

// `items`, skipping (and counting in `ignored`) what cannot be read under --ignore-errors
// (`ignored` null: as they are).
data::Dataset readable(const data::Dataset& items,
                       const std::shared_ptr<data::IgnoredErrors>& ignored);

// A TFRecord spec's records {serialized, file, int64 index} (the files shuffled when
// `shuffle_files`), as --tfrecord-compression says; a damaged file's rest is one error under
// --ignore-errors.
struct Records {
  data::Dataset items;
  int64_t file_count = 0;
  std::string description;  // "4 TFRecord files (/data/train-*)"
};
Records open_records(const DataSpec& spec, const TrainOptions& options, bool shuffle_files);

// The largest int64 `feature` of the records (reading each record's once), -1 for none.
int64_t largest_label(const data::Dataset& records, const TrainOptions& options);

// The classes of TFRecord labels: the largest label of `train` + 1 and where that came from
// ("the largest label of --train-data, 4, + 1"). DataError when `train` has no label, or when
// `test` (null: not checked) has a label beyond them. Reads every record's label once.
std::pair<int64_t, std::string> count_record_classes(const data::Dataset& train,
                                                     const data::Dataset* test,
                                                     const TrainOptions& options);

// The first `limit` items (all when limit <= 0): --train-examples and --test-examples.
data::Dataset first_n(const data::Dataset& items, int64_t limit);

// Global batches of `examples`, two prefetched, carrying the sharding policy their
// distribution will use.
data::Dataset global_batches(const data::Dataset& examples, int64_t global_batch,
                             const data::DatasetOptions& shard);

// --auto-shard for files, `auto` resolved (file, or data in an elastic job), so that the
// datasets carry the policy their distribution will use.
data::DatasetOptions sharding(const TrainOptions& options, bool elastic);

// Said before anything is read, naming the flag: under kFile every worker needs a file.
void check_enough_files(int64_t file_count, const std::string& flag, const std::string& spec,
                        const data::DatasetOptions& shard, int workers);

// "--auto-shard file: each of the 2 workers reads its own 4 of the 8 files ..." for the job's
// header ("" for one worker).
std::string describe_sharding(int64_t file_count, const data::DatasetOptions& shard, int workers);

}  // namespace dist::tools
