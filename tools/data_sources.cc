#include "data_sources.h"

#include <algorithm>
#include <thread>

#include "dist/core/error.h"
#include "dist/core/printable.h"
#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/tfrecord_dataset.h"

namespace dist::tools {

using data::Dataset;
using data::Element;

DataSpec parse_spec(const std::string& flag, const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  DIST_CHECK_ARG(colon != std::string::npos && colon + 1 < text.size() &&
                     (kind == "tfrecord" || kind == "images"),
                 flag, " '", text,
                 "' is not a data spec: use tfrecord:GLOB (TFRecord files of tf.train.Example "
                 "records, e.g. tfrecord:/data/train-*.tfrecord) or images:DIR (a folder with one "
                 "sub-folder of images per class)");
  return {kind == "tfrecord" ? DataSpec::Kind::kTFRecord : DataSpec::Kind::kImages,
          text.substr(colon + 1)};
}

int64_t decode_threads(const TrainOptions& options) {
  if (options.decode_threads > 0) return options.decode_threads;
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

std::string ExampleSource::operator()() const {
  // A file's name comes from the user's folders: escaped and cut like anything read.
  const std::string name = printable(data::string_of(file), 256);
  return record < 0 ? name : "record " + std::to_string(record) + " of " + name;
}

Dataset readable(const Dataset& items, const std::shared_ptr<data::IgnoredErrors>& ignored) {
  return ignored ? items.ignore_errors(ignored) : items;
}

Records open_records(const DataSpec& spec, const TrainOptions& options, bool shuffle_files) {
  auto files = data::match_files(spec.location);
  data::TFRecordOptions read;
  read.compression = data::compression_from_name(options.tfrecord_compression);
  read.shuffle_files = shuffle_files;
  read.seed = options.seed;
  read.with_source = true;
  // Under --ignore-errors a file's framing damage skips the rest of that file as one error, and
  // the epoch's count is the records before it (docs/guide.md).
  read.count_up_to_damage = options.ignore_errors;
  return {data::tfrecord_dataset(files, read), static_cast<int64_t>(files.size()),
          std::to_string(files.size()) + " TFRecord files (" + spec.location + ")"};
}

int64_t largest_label(const Dataset& records, const TrainOptions& options) {
  const data::FeatureSpec label_only(
      {data::FixedLenFeature(options.label_feature, data::FeatureType::kInt64, {})});
  const auto skipped = options.ignore_errors ? std::make_shared<data::IgnoredErrors>() : nullptr;
  Dataset labels = readable(records, skipped)
                       .map(
                           [label_only](const Element& e) {
                             try {
                               return data::parse_example(data::bytes_view(e[0]), label_only);
                             } catch (const DataError& error) {
                               throw DataError(ExampleSource{e[1], e[2].item<int64_t>()}() + ": " +
                                               error.what());
                             }
                           },
                           data::MapOptions{decode_threads(options)});
  int64_t largest = -1;
  for (const Element& e : readable(labels, skipped).iterator())
    largest = std::max(largest, e[0].item<int64_t>());
  return largest;
}

std::pair<int64_t, std::string> count_record_classes(const Dataset& train, const Dataset* test,
                                                     const TrainOptions& options) {
  const int64_t largest = largest_label(train, options);
  DIST_CHECK(largest >= 0, DataError, "--train-data '", options.train_data,
             "' has no label to count the classes from; give --num-classes");
  const int64_t classes = largest + 1;
  std::string source = detail::concat("the largest label of --train-data, ", largest, ", + 1");
  if (test == nullptr) return {classes, source};
  const int64_t test_largest = largest_label(*test, options);
  DIST_CHECK(test_largest < classes, DataError, "--test-data '", options.test_data, "' has label ",
             test_largest, " but the training data has ", classes, " classes (", source,
             "): give --num-classes if some class has no training example, or test data of the "
             "training data's classes");
  return {classes, source};
}

Dataset first_n(const Dataset& items, int64_t limit) {
  return limit > 0 ? items.take(limit) : items;
}

Dataset global_batches(const Dataset& examples, int64_t global_batch,
                       const data::DatasetOptions& shard) {
  return examples.batch(global_batch).prefetch(2).with_options(shard);
}

data::DatasetOptions sharding(const TrainOptions& options, bool elastic) {
  AutoShardPolicy policy = options.auto_shard;
  DIST_CHECK_ARG(!(elastic && policy == AutoShardPolicy::kFile),
                 "--auto-shard file cannot follow an elastic resize (which worker reads which "
                 "file would change mid-epoch): use --auto-shard data");
  if (policy == AutoShardPolicy::kAuto)
    policy = elastic ? AutoShardPolicy::kData : AutoShardPolicy::kFile;
  return {policy};
}

void check_enough_files(int64_t file_count, const std::string& flag, const std::string& spec,
                        const data::DatasetOptions& shard, int workers) {
  if (shard.auto_shard_policy != AutoShardPolicy::kFile || workers < 2) return;
  DIST_CHECK_ARG(file_count >= workers, flag, " '", spec, "' has ", file_count, " file",
                 file_count == 1 ? "" : "s", " but the job has ", workers,
                 " workers, and --auto-shard file (auto's choice for files) gives each worker "
                 "files of its own: write the data in at least ",
                 workers, " files, or use --auto-shard data");
}

std::string describe_sharding(int64_t file_count, const data::DatasetOptions& shard, int workers) {
  if (workers < 2) return "";
  const AutoShardPolicy policy = *shard.auto_shard_policy;
  if (policy == AutoShardPolicy::kFile) {
    const int64_t fewest = file_count / workers;
    const int64_t most = fewest + (file_count % workers ? 1 : 0);
    return detail::concat(
        "--auto-shard file: each of the ", workers, " workers reads its own ",
        fewest == most ? std::to_string(most) : detail::concat(fewest, " or ", most), " of the ",
        file_count,
        " files (every example once per epoch; a step's global batch is the "
        "workers' batches together)");
  }
  if (policy == AutoShardPolicy::kData)
    return detail::concat("--auto-shard data: each of the ", workers, " workers reads all ",
                          file_count,
                          " files and keeps its rows of each global batch (one device's batches)");
  return detail::concat("--auto-shard off: each of the ", workers,
                        " workers reads all files and trains on whole batches of its own");
}

}  // namespace dist::tools
