#include "feature_data.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include <ATen/ATen.h>

#include "data_sources.h"
#include "dist/core/error.h"
#include "dist/data/example.h"
#include "dist/data/files.h"

namespace dist::tools {
namespace {

using data::Dataset;
using data::Element;
using data::FeatureType;

DataSpec record_spec(const std::string& flag, const std::string& text) {
  const DataSpec spec = parse_spec(flag, text);
  DIST_CHECK_ARG(spec.kind == DataSpec::Kind::kTFRecord, "--features reads TFRecord features, but ",
                 flag, " '", text,
                 "' is an image folder: give tfrecord:GLOB, or drop --features to train on the "
                 "images");
  return spec;
}

// The first record {serialized, file, index} of `records`; DataError (exit 3) when there is
// none (under --ignore-errors, none readable).
Element first_record(const Records& records, const TrainOptions& options, const std::string& flag) {
  const auto skipped = options.ignore_errors ? std::make_shared<data::IgnoredErrors>() : nullptr;
  auto first = readable(records.items, skipped).iterator().next();
  DIST_CHECK(first.has_value(), DataError, flag, " has no records: its files are empty",
             options.ignore_errors ? " or none of their records can be read" : "",
             "; give files with records");
  return *first;
}

// The type and length of feature `name` in `record`, which `flag` names. A float or int64 list
// of at least one value; otherwise the parser's own words (missing, with the names the record
// has; bytes; no values) say what is there.
FeatureColumn column_of(const Element& record, const std::string& name, const std::string& flag) {
  const std::string_view serialized = data::bytes_view(record[0]);
  const ExampleSource source{record[1], record[2].item<int64_t>()};
  for (const FeatureType type : {FeatureType::kFloat, FeatureType::kInt64}) {
    try {
      const Element e =
          data::parse_example(serialized, data::FeatureSpec({data::VarLenFeature(name, type)}));
      if (e[0].numel() > 0) return {name, type, e[0].numel()};
      break;  // missing or empty: said below
    } catch (const DataError&) {
      // another type: try the next
    }
  }
  try {
    data::parse_example(serialized,
                        data::FeatureSpec({data::FixedLenFeature(name, FeatureType::kFloat, {1})}));
  } catch (const DataError& error) {
    throw DataError(detail::concat(flag, " '", name, "' in ", source(), ": ", error.what(),
                                   "; it must be a float or int64 list of one length in every "
                                   "record"));
  }
  throw DataError(
      detail::concat(flag, " '", name, "' in ", source(), " is neither a float nor an int64 list"));
}

// A record {serialized, file, index} to {the row of features joined, the label}.
struct RowParser {
  data::FeatureSpec spec;  // the columns at their lengths, then the label
  bool int_row = false;    // every column int64: the row stays int64
  // The built-in models take C x H x W: a row of F is given to them as 1 x 1 x F.
  bool as_image = false;
  bool regress = false;
  int64_t targets = 0;  // regress: the label's values in every record
  std::string label_name;
  int64_t classes = 0;
  std::string classes_source;

  Element operator()(const Element& record) const {
    const ExampleSource source{record[1], record[2].item<int64_t>()};
    try {
      Element parsed = data::parse_example(data::bytes_view(record[0]), spec);
      const at::Tensor label = parsed.back();
      parsed.pop_back();
      at::Tensor row = parsed.size() == 1 ? parsed[0] : at::cat(parsed);
      if (!int_row) row = row.to(at::kFloat);
      if (as_image) row = row.reshape({1, 1, -1});
      if (regress) {
        DIST_CHECK(label.numel() == targets, DataError, "--label-feature '", label_name, "' has ",
                   label.numel(), " values but the first record's has ", targets,
                   " (the model's outputs); every record needs as many");
        return {row, label.to(at::kFloat)};
      }
      const int64_t value = label.item<int64_t>();
      DIST_CHECK(value >= 0 && value < classes, DataError, "label ", value, " is outside 0..",
                 classes - 1, " (", classes, " classes: ", classes_source, ")");
      return {row, label};
    } catch (const DataError& error) {
      throw DataError(source() + ": " + error.what());
    }
  }
};

RowParser row_parser(const TrainOptions& options, const DataShape& shape) {
  std::vector<data::FeatureSpec::Entry> entries;
  bool int_row = true;
  for (const FeatureColumn& c : shape.features) {
    entries.emplace_back(data::FixedLenFeature(c.name, c.type, {c.length}));
    int_row = int_row && c.type == FeatureType::kInt64;
  }
  const bool regress = options.task.kind == TaskKind::kRegress;
  // Regression labels are read as floats (an int64 list is converted per record).
  if (regress)
    entries.emplace_back(data::VarLenFeature(options.label_feature, FeatureType::kFloat));
  else
    entries.emplace_back(data::FixedLenFeature(options.label_feature, FeatureType::kInt64, {}));
  return {data::FeatureSpec(std::move(entries)),
          int_row,
          /*as_image=*/options.model_file.empty(),
          regress,
          shape.targets,
          options.label_feature,
          shape.classes,
          shape.classes_source};
}

}  // namespace

void inspect_features(const TrainOptions& options, DataShape& shape) {
  const Records train =
      open_records(record_spec("--train-data", options.train_data), options, false);
  const Records test = open_records(record_spec("--test-data", options.test_data), options, false);
  const Element first = first_record(train, options, "--train-data");
  first_record(test, options, "--test-data");
  shape.features.clear();
  for (const std::string& name : options.task.features)
    shape.features.push_back(column_of(first, name, "--features"));
  const FeatureColumn label = column_of(first, options.label_feature, "--label-feature");
  if (options.task.kind == TaskKind::kRegress) {
    shape.targets = label.length;
    shape.classes = 0;
    shape.classes_source = "";
  } else {
    DIST_CHECK(label.type == FeatureType::kInt64 && label.length == 1, DataError,
               "--label-feature '", options.label_feature, "' in the first record of ",
               options.train_data, " is a ", data::feature_type_name(label.type), " list of ",
               label.length,
               " values, not one int64 class: give the class label's feature, or --task "
               "regress to predict the values");
    if (options.images.num_classes <= 0)
      std::tie(shape.classes, shape.classes_source) =
          count_record_classes(train.items, &test.items, options);
  }
  RowParser parser = row_parser(options, shape);
  parser.as_image = false;  // the row as the model file's check takes it
  shape.first_row = parser(first)[0];
}

TrainingData open_feature_data(const TrainOptions& options, const DataShape& shape,
                               int64_t global_batch, int workers, bool elastic) {
  std::shared_ptr<data::IgnoredErrors> ignored;
  if (options.ignore_errors) ignored = std::make_shared<data::IgnoredErrors>();
  const auto shard = sharding(options, elastic);
  const RowParser parser = row_parser(options, shape);
  const data::MapOptions threads{decode_threads(options)};
  // --train-examples N takes the first N in the files' order (see training_data.cc).
  const Records train = open_records(record_spec("--train-data", options.train_data), options,
                                     /*shuffle_files=*/options.train_examples <= 0);
  check_enough_files(train.file_count, "--train-data", options.train_data, shard, workers);
  const int64_t num_train = first_n(train.items, options.train_examples).cardinality();
  const int64_t buffer = std::min(options.shuffle_buffer, std::max<int64_t>(num_train, 1));
  const Dataset train_examples =
      readable(readable(first_n(train.items, options.train_examples), ignored)
                   .shuffle(buffer, options.seed)
                   .map(parser, threads),
               ignored);
  const Records test = open_records(record_spec("--test-data", options.test_data), options, false);
  check_enough_files(test.file_count, "--test-data", options.test_data, shard, workers);
  const Dataset test_examples = readable(
      readable(first_n(test.items, options.test_examples), ignored).map(parser, threads), ignored);
  return {global_batches(train_examples, global_batch, shard),
          global_batches(test_examples, global_batch, shard),
          num_train,
          "train: " + train.description + "; test: " + test.description,
          describe_sharding(train.file_count, shard, workers),
          ignored};
}

}  // namespace dist::tools
