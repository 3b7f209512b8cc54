#include "training_data.h"

#include <algorithm>
#include <thread>

#include "dist/core/error.h"
#include "dist/core/printable.h"
#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/image_codec.h"
#include "dist/data/image_folder.h"
#include "dist/data/mnist.h"
#include "dist/data/tfrecord_dataset.h"

namespace dist::tools {
namespace {

using data::Dataset;
using data::Element;

// Fashion-MNIST's classes.
constexpr int64_t kFashionMnistClasses = 10;

struct DataSpec {
  enum class Kind { kTFRecord, kImages } kind;
  std::string location;  // the glob or the directory
};

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

// Where an example came from, said only when something is wrong with it (building the text
// for every example would cost more than reading it).
struct ExampleSource {
  at::Tensor file;      // the file's path as bytes
  int64_t record = -1;  // the record's index in a TFRecord file; -1: the file is the image
  std::string operator()() const {
    // A file's name comes from the user's folders: escaped and cut like anything read.
    const std::string name = printable(data::string_of(file), 256);
    return record < 0 ? name : "record " + std::to_string(record) + " of " + name;
  }
};

// An example's image as stored: decoded (or the raw pixels of ImageFormat::kRaw records),
// uint8 [C, H, W]. `channels`: 0 as stored, else decoded straight to 1 or 3.
at::Tensor stored_image(const Element& example, int64_t channels) {
  const at::Tensor& raw_shape = example[4];
  if (raw_shape.numel() != 3) return data::decode_image(example[0], {channels, 0, 0, true});
  const int64_t c = raw_shape[0].item<int64_t>(), h = raw_shape[1].item<int64_t>(),
                w = raw_shape[2].item<int64_t>();
  DIST_CHECK(c == 1 || c == 3, DataError, "a raw image of ", c,
             " channels; raw images have 1 (grey) or 3 (RGB)");
  DIST_CHECK(h > 0 && w > 0 && example[0].numel() == c * h * w, DataError, "a raw image of ",
             example[0].numel(),
             " bytes, but its image/channels, image/height and image/width say ", c, "x", h, "x",
             w);
  const at::Tensor pixels = example[0].reshape({c, h, w});
  return channels == 0 ? pixels : convert_channels(pixels, channels);
}

// An item of a source ({encoded, label, file, record, raw shape}, see Unpack) to
// {float image [C, H, W], label}, made ready by the preparation and its label checked.
struct ExampleDecoder {
  ImagePreparation prepare;
  int64_t classes = 0;
  std::string classes_source;
  bool training = false;

  Element operator()(const Element& example, const data::ElementContext& context) const {
    const ExampleSource source{example[2], example[3].item<int64_t>()};
    try {
      const at::Tensor image =
          stored_image(example, prepare.channels_chosen ? prepare.channels : 0);
      const int64_t label = example[1].item<int64_t>();
      DIST_CHECK(label >= 0 && label < classes, DataError, "label ", label, " is outside 0..",
                 classes - 1, " (", classes, " classes: ", classes_source, ")");
      return {prepare(image, context, training, source()), example[1]};
    } catch (const DataError& error) {
      const std::string what = error.what();
      // The preparation names the source itself.
      if (what.rfind(source(), 0) == 0) throw;
      throw DataError(source() + ": " + what);
    }
  }
};

// A source's item to {encoded image, int64 label, file, int64 record index (-1 for an image
// file), int64 [C, H, W] for raw pixels (else empty)}: the image folder's as they are, a
// TFRecord's parsed as a tf.train.Example.
using Unpack = std::function<Element(const Element&)>;

struct Source {
  DataSpec spec;
  Dataset items;            // image files {encoded, label, path} or records {record, file, index}
  Unpack unpack;            // an item to the example, as above
  std::string description;  // for the job's header
  int64_t file_count = 0;   // the files kFile divides: TFRecord files, or the folder's images
};

Source open_source(const DataSpec& spec, const TrainOptions& options, bool shuffle_files) {
  const at::Tensor none = at::empty({0}, at::kLong);
  if (spec.kind == DataSpec::Kind::kImages) {
    Dataset files = data::image_folder_files(spec.location, {shuffle_files, options.seed, true});
    const at::Tensor no_record = at::scalar_tensor(-1, at::kLong);
    return {spec, files,
            [none, no_record](const Element& e) {
              return Element{e[0], e[1], e[2], no_record, none};
            },
            "image folder " + spec.location, data::source_file_count(files)};
  }
  auto files = data::match_files(spec.location);
  data::TFRecordOptions read;
  read.compression = data::compression_from_name(options.tfrecord_compression);
  read.shuffle_files = shuffle_files;
  read.seed = options.seed;
  read.with_source = true;
  // Under --ignore-errors a file's framing damage skips the rest of that file as one error, and
  // the epoch's count is the records before it (docs/guide.md).
  read.count_up_to_damage = options.ignore_errors;
  const data::FeatureSpec features({
      data::FixedLenFeature(options.image_feature, data::FeatureType::kBytes, {}),
      data::FixedLenFeature(options.label_feature, data::FeatureType::kInt64, {}),
      // Raw pixels instead of an encoded image (ImageFormat::kRaw in dist/train/image_export.h)
      // say so.
      data::FixedLenFeature("image/format", data::FeatureType::kBytes, {}, data::string_tensor("")),
  });
  const data::FeatureSpec raw_size({
      data::FixedLenFeature("image/channels", data::FeatureType::kInt64, {},
                            at::scalar_tensor(1, at::kLong)),
      data::FixedLenFeature("image/height", data::FeatureType::kInt64, {}),
      data::FixedLenFeature("image/width", data::FeatureType::kInt64, {}),
  });
  Unpack parse = [features, raw_size, none](const Element& e) {
    const std::string_view record = data::bytes_view(e[0]);
    try {
      Element parsed = data::parse_example(record, features);
      const bool raw = parsed[2].numel() == 3 && data::bytes_view(parsed[2]) == "raw";
      if (!raw) return Element{parsed[0], parsed[1], e[1], e[2], none};
      Element size = data::parse_example(record, raw_size);
      return Element{parsed[0], parsed[1], e[1], e[2], at::stack(size)};
    } catch (const DataError& error) {
      throw DataError(ExampleSource{e[1], e[2].item<int64_t>()}() + ": " + error.what());
    }
  };
  return {spec, data::tfrecord_dataset(files, read), parse,
          std::to_string(files.size()) + " TFRecord files (" + spec.location + ")",
          static_cast<int64_t>(files.size())};
}

// The source's items, skipping (and counting in `ignored`) what cannot be read under
// --ignore-errors.
Dataset readable(const Dataset& items, const std::shared_ptr<data::IgnoredErrors>& ignored) {
  return ignored ? items.ignore_errors(ignored) : items;
}

// The first image of a source as stored; DataError (exit 3) when it has none.
at::Tensor first_image(const Source& source, const TrainOptions& options, const std::string& flag) {
  // Under --ignore-errors a bad first record is skipped here too (counted later, by the job's
  // own pass, not twice).
  const auto skipped = options.ignore_errors ? std::make_shared<data::IgnoredErrors>() : nullptr;
  Dataset images =
      readable(source.items, skipped).map([unpack = source.unpack](const Element& item) {
        const Element example = unpack(item);
        try {
          return Element{stored_image(example, 0)};
        } catch (const DataError& error) {
          throw DataError(ExampleSource{example[2], example[3].item<int64_t>()}() + ": " +
                          error.what());
        }
      });
  auto first = readable(images, skipped).iterator().next();
  // No data is missing data (exit 3), as dist-train.md's exit codes say.
  DIST_CHECK(first.has_value(), DataError, flag, " has no examples: its files are empty",
             options.ignore_errors ? " or none of their records can be used" : "",
             "; give files with records or images");
  return (*first)[0];
}

// The largest label of a TFRecord source (reading every record's label once), -1 for none.
int64_t largest_label(const Source& source, const TrainOptions& options) {
  const data::FeatureSpec label_only(
      {data::FixedLenFeature(options.label_feature, data::FeatureType::kInt64, {})});
  const auto skipped = options.ignore_errors ? std::make_shared<data::IgnoredErrors>() : nullptr;
  Dataset labels = readable(source.items, skipped)
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

// The training data's classes and where they came from; the test data checked against them.
void count_classes(const Source& train, const Source& test, const TrainOptions& options,
                   DataShape& shape) {
  if (train.spec.kind == DataSpec::Kind::kImages) {
    const auto names = data::image_folder_classes(train.spec.location);
    const auto test_names = test.spec.kind == DataSpec::Kind::kImages
                                ? data::image_folder_classes(test.spec.location)
                                : names;
    DIST_CHECK(test_names == names, DataError, "--test-data '", options.test_data, "' has ",
               test_names.size(), " class folders and --train-data '", options.train_data, "' has ",
               names.size(),
               ", not the same names: a label is a class folder's place in the sorted names, so "
               "both folders need the same class folders");
    if (options.images.num_classes > 0) return;
    shape.classes = static_cast<int64_t>(names.size());
    shape.classes_source =
        detail::concat("the ", names.size(), " class folders of ", options.train_data);
    return;
  }
  if (options.images.num_classes > 0) return;
  const int64_t largest = largest_label(train, options);
  DIST_CHECK(largest >= 0, DataError, "--train-data '", options.train_data,
             "' has no label to count the classes from; give --num-classes");
  shape.classes = largest + 1;
  shape.classes_source = detail::concat("the largest label of --train-data, ", largest, ", + 1");
  if (test.spec.kind != DataSpec::Kind::kTFRecord) return;
  const int64_t test_largest = largest_label(test, options);
  DIST_CHECK(test_largest < shape.classes, DataError, "--test-data '", options.test_data,
             "' has label ", test_largest, " but the training data has ", shape.classes,
             " classes (", shape.classes_source,
             "): give --num-classes if some class has no training example, or test data of the "
             "training data's classes");
}

// --auto-shard for files, `auto` resolved here (file, or data in an elastic job), so that the
// datasets carry the policy their distribution will use.
data::DatasetOptions sharding(const TrainOptions& options, bool elastic) {
  AutoShardPolicy policy = options.auto_shard;
  DIST_CHECK_ARG(!(elastic && policy == AutoShardPolicy::kFile),
                 "--auto-shard file cannot follow an elastic resize (which worker reads which "
                 "file would change mid-epoch): use --auto-shard data");
  if (policy == AutoShardPolicy::kAuto)
    policy = elastic ? AutoShardPolicy::kData : AutoShardPolicy::kFile;
  return {policy};
}

// Said before anything is read, naming the flag: under kFile every worker needs a file.
void check_enough_files(const Source& source, const std::string& flag, const std::string& spec,
                        const data::DatasetOptions& shard, int workers) {
  if (shard.auto_shard_policy != AutoShardPolicy::kFile || workers < 2) return;
  DIST_CHECK_ARG(source.file_count >= workers, flag, " '", spec, "' has ", source.file_count,
                 " file", source.file_count == 1 ? "" : "s", " but the job has ", workers,
                 " workers, and --auto-shard file (auto's choice for files) gives each worker "
                 "files of its own: write the data in at least ",
                 workers, " files, or use --auto-shard data");
}

// "--auto-shard file: each of the 2 workers reads its own 4 of the 8 TFRecord files" for the
// job's header.
std::string describe_sharding(const Source& source, const data::DatasetOptions& shard,
                              int workers) {
  if (workers < 2) return "";
  const AutoShardPolicy policy = *shard.auto_shard_policy;
  if (policy == AutoShardPolicy::kFile) {
    const int64_t fewest = source.file_count / workers;
    const int64_t most = fewest + (source.file_count % workers ? 1 : 0);
    return detail::concat(
        "--auto-shard file: each of the ", workers, " workers reads its own ",
        fewest == most ? std::to_string(most) : detail::concat(fewest, " or ", most), " of the ",
        source.file_count,
        " files (every example once per epoch; a step's global batch is the "
        "workers' batches together)");
  }
  if (policy == AutoShardPolicy::kData)
    return detail::concat("--auto-shard data: each of the ", workers, " workers reads all ",
                          source.file_count,
                          " files and keeps its rows of each global batch (one device's batches)");
  return detail::concat("--auto-shard off: each of the ", workers,
                        " workers reads all files and trains on whole batches of its own");
}

bool images_as_stored(const TrainOptions& options, const ImagePreparation& prepare) {
  return prepare.channels == 1 && prepare.height == 28 && prepare.width == 28 &&
         !options.images.flip && !options.images.crop && !options.images.normalized();
}

TrainingData fashion_mnist_data(const TrainOptions& options, const ImagePreparation& prepare,
                                int64_t global_batch) {
  // Bytes until batched: a shuffle over the whole set holds views of 47 MB, not 188 MB.
  Dataset examples = data::fashion_mnist_bytes(options.data_dir, data::Split::kTrain);
  if (options.train_examples > 0) examples = examples.take(options.train_examples);
  const int64_t num_train = examples.cardinality();
  Dataset test = data::fashion_mnist_bytes(options.data_dir, data::Split::kTest);
  if (options.test_examples > 0) test = test.take(options.test_examples);
  const std::string description = "Fashion-MNIST (IDX files in " + options.data_dir + ")";
  examples = examples.shuffle(num_train, options.seed);
  if (images_as_stored(options, prepare))
    return {examples.batch(global_batch).map(data::scale_images_of).prefetch(2),
            test.batch(global_batch).map(data::scale_images_of).prefetch(2),
            num_train,
            description,
            "",
            nullptr};
  // The image flags: each image made ready on its own, as a user's files are.
  auto prepared = [prepare](bool training) {
    return [prepare, training](Element e, const data::ElementContext& context) {
      return Element{prepare(e[0], context, training, "a Fashion-MNIST image"), e[1]};
    };
  };
  const data::MapOptions threads{decode_threads(options)};
  return {examples.map_with_context(prepared(true), threads).batch(global_batch).prefetch(2),
          test.map_with_context(prepared(false), threads).batch(global_batch).prefetch(2),
          num_train,
          description,
          "",
          nullptr};
}

Dataset prepared_examples(const Dataset& items, const Source& source, const ExampleDecoder& decoder,
                          const TrainOptions& options,
                          const std::shared_ptr<data::IgnoredErrors>& ignored) {
  Dataset images = items.map_with_context(
      [decoder, unpack = source.unpack](Element item, const data::ElementContext& context) {
        return decoder(unpack(item), context);
      },
      data::MapOptions{decode_threads(options)});
  return readable(images, ignored);
}

}  // namespace

DataShape inspect_training_data(const TrainOptions& options) {
  DataShape shape;
  if (options.train_data.empty()) {
    shape.first = data::fashion_mnist_bytes(options.data_dir, data::Split::kTrain)
                      .take(1)
                      .iterator()
                      .next()
                      .value()[0];
    shape.classes = kFashionMnistClasses;
    shape.classes_source = "Fashion-MNIST's 10 classes";
  } else {
    DIST_CHECK_ARG(!options.test_data.empty(),
                   "--train-data needs --test-data too (the data to evaluate on after each "
                   "epoch, in the same kinds of spec)");
    const Source train =
        open_source(parse_spec("--train-data", options.train_data), options, false);
    const Source test = open_source(parse_spec("--test-data", options.test_data), options, false);
    shape.first = first_image(train, options, "--train-data");
    first_image(test, options, "--test-data");
    count_classes(train, test, options, shape);
  }
  if (options.images.num_classes > 0) {
    shape.classes = options.images.num_classes;
    shape.classes_source = "--num-classes";
  }
  return shape;
}

TrainingData open_training_data(const TrainOptions& options, const ImagePreparation& prepare,
                                const DataShape& shape, int64_t global_batch, int workers,
                                bool elastic) {
  if (options.train_data.empty()) return fashion_mnist_data(options, prepare, global_batch);
  std::shared_ptr<data::IgnoredErrors> ignored;
  if (options.ignore_errors) ignored = std::make_shared<data::IgnoredErrors>();
  const auto shard = sharding(options, elastic);

  // --train-examples N takes the first N in the files' order, the same examples every epoch
  // (as from the IDX files), so the files are then read in order and only the N shuffled.
  Source train = open_source(parse_spec("--train-data", options.train_data), options,
                             /*shuffle_files=*/options.train_examples <= 0);
  check_enough_files(train, "--train-data", options.train_data, shard, workers);
  auto limited = [](const Dataset& items, int64_t limit) {
    return limit > 0 ? items.take(limit) : items;
  };
  // Under --ignore-errors the count is what the files hold, bad records included.
  const int64_t num_train = limited(train.items, options.train_examples).cardinality();
  // Encoded items are shuffled (a bounded buffer: memory does not grow with the data), then
  // decoded on the decoding threads in that order, each image's augmentation keyed by its place
  // in that order.
  const int64_t buffer = std::min(options.shuffle_buffer, std::max<int64_t>(num_train, 1));
  const ExampleDecoder train_decoder{prepare, shape.classes, shape.classes_source, true};
  Dataset train_batches =
      prepared_examples(readable(limited(train.items, options.train_examples), ignored)
                            .shuffle(buffer, options.seed),
                        train, train_decoder, options, ignored)
          .batch(global_batch)
          .prefetch(2)
          .with_options(shard);

  Source test = open_source(parse_spec("--test-data", options.test_data), options, false);
  check_enough_files(test, "--test-data", options.test_data, shard, workers);
  const ExampleDecoder test_decoder{prepare, shape.classes, shape.classes_source, false};
  Dataset test_batches =
      prepared_examples(readable(limited(test.items, options.test_examples), ignored), test,
                        test_decoder, options, ignored)
          .batch(global_batch)
          .prefetch(2)
          .with_options(shard);
  return {train_batches,
          test_batches,
          num_train,
          "train: " + train.description + "; test: " + test.description,
          describe_sharding(train, shard, workers),
          ignored};
}

}  // namespace dist::tools
