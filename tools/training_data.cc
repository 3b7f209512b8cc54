#include "training_data.h"

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

// The built-in models' classes (every one ends in a Dense 10).
constexpr int64_t kClasses = 10;

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

// An item of a source ({encoded, label, file, record, raw shape}, see Unpack) to
// {float image [1, H, W], label}, checked against the model's needs.
struct ExampleDecoder {
  int64_t height = 0, width = 0;  // the first image's size, which every image must have

  Element operator()(const Element& example) const {
    const ExampleSource source{example[2], example[3].item<int64_t>()};
    const at::Tensor& raw_shape = example[4];
    at::Tensor image;
    try {
      image = raw_shape.numel() == 3 ? raw_pixels(example[0], raw_shape)
                                     : data::decode_image(example[0], {1, 0, 0});
    } catch (const DataError& error) {
      throw DataError(source() + ": " + error.what());
    }
    DIST_CHECK(height == 0 || (image.size(1) == height && image.size(2) == width), DataError,
               source(), ": the image is ", image.size(1), "x", image.size(2),
               " but the data's first image is ", height, "x", width,
               "; dist-train batches images of one size: resize the data to one size");
    const int64_t label = example[1].item<int64_t>();
    DIST_CHECK(label >= 0 && label < kClasses, DataError, source(), ": label ", label,
               " is outside 0..", kClasses - 1, "; the built-in models have ", kClasses,
               " classes");
    return {data::scale_images(image), example[1]};
  }

  static at::Tensor raw_pixels(const at::Tensor& bytes, const at::Tensor& shape) {
    const int64_t c = shape[0].item<int64_t>(), h = shape[1].item<int64_t>(),
                  w = shape[2].item<int64_t>();
    DIST_CHECK(c == 1, DataError, "a raw image of ", c,
               " channels; dist-train's models take grey images (1 channel)");
    DIST_CHECK(h > 0 && w > 0 && bytes.numel() == h * w, DataError, "a raw image of ",
               bytes.numel(), " bytes, but its image/height and image/width say ", h, "x", w);
    return bytes.reshape({1, h, w});
  }
};

// A source's item to {encoded image, int64 label, file, int64 record index (-1 for an image
// file), int64 [C, H, W] for raw pixels (else empty)}: the image folder's as they are, a
// TFRecord's parsed as a tf.train.Example.
using Unpack = std::function<Element(const Element&)>;

struct Source {
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
    return {files,
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
      // Raw pixels instead of an encoded image (ImageFormat::kRaw in dist/train/image_export.h) say
      // so.
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
  return {data::tfrecord_dataset(files, read), parse,
          std::to_string(files.size()) + " TFRecord files (" + spec.location + ")",
          static_cast<int64_t>(files.size())};
}

// The shape check before training: the first image, decoded, against the model.
ExampleDecoder check_first_image(const Source& source, const TrainOptions& options,
                                 const std::string& flag) {
  // Under --ignore-errors a bad first record is skipped here too (counted later, by the job's
  // own pass, not twice).
  const Dataset items = options.ignore_errors
                            ? source.items.ignore_errors(std::make_shared<data::IgnoredErrors>())
                            : source.items;
  auto first = items.iterator().next();
  // No data is missing data (exit 3), as dist-train.md's exit codes say.
  DIST_CHECK(first.has_value(), DataError, flag, " has no examples: its files are empty",
             options.ignore_errors ? " or none of their records can be used" : "",
             "; give files with records or images");
  const Element image = ExampleDecoder{}(source.unpack(*first));
  ExampleDecoder decoder{image[0].size(1), image[0].size(2)};
  // A model file's forward is checked on a batch instead (model_file.h).
  const bool any_size = options.model == ModelKind::kResnet || !options.model_file.empty();
  DIST_CHECK_ARG(any_size || (decoder.height == 28 && decoder.width == 28), "--model ",
                 name_of(options.model),
                 " takes 28x28 grey images (1x28x28, like Fashion-MNIST)"
                 " but the images of ",
                 flag, " are ", decoder.height, "x", decoder.width,
                 ": use --model resnet (any size), or resize the data to 28x28");
  return decoder;
}

// The items of a source (under --ignore-errors, skipping what cannot be read), the first N
// if asked.
Dataset readable(const Source& source, int64_t limit,
                 const std::shared_ptr<data::IgnoredErrors>& ignored) {
  Dataset items = ignored ? source.items.ignore_errors(ignored) : source.items;
  return limit > 0 ? items.take(limit) : items;
}

// Decoded, scaled examples on the decoding threads, skipping (and counting) the bad ones under
// --ignore-errors.
Dataset decoded(const Dataset& items, const Source& source, const ExampleDecoder& decoder,
                const TrainOptions& options, const std::shared_ptr<data::IgnoredErrors>& ignored) {
  Dataset images =
      items.map([decoder, unpack = source.unpack](Element item) { return decoder(unpack(item)); },
                data::MapOptions{decode_threads(options)});
  return ignored ? images.ignore_errors(ignored) : images;
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

}  // namespace

TrainingData open_training_data(const TrainOptions& options, int64_t global_batch, int workers,
                                bool elastic) {
  if (options.train_data.empty()) {
    // Bytes until batched: a shuffle over the whole set holds views of 47 MB, not 188 MB.
    Dataset examples = data::fashion_mnist_bytes(options.data_dir, data::Split::kTrain);
    if (options.train_examples > 0) examples = examples.take(options.train_examples);
    const int64_t num_train = examples.cardinality();
    Dataset test = data::fashion_mnist_bytes(options.data_dir, data::Split::kTest);
    if (options.test_examples > 0) test = test.take(options.test_examples);
    return {examples.shuffle(num_train, options.seed)
                .batch(global_batch)
                .map(data::scale_images_of)
                .prefetch(2),
            test.batch(global_batch).map(data::scale_images_of).prefetch(2), num_train,
            "Fashion-MNIST (IDX files in " + options.data_dir + ")", nullptr};
  }
  DIST_CHECK_ARG(!options.test_data.empty(),
                 "--train-data needs --test-data too (the data to evaluate on after each "
                 "epoch, in the same kinds of spec)");
  std::shared_ptr<data::IgnoredErrors> ignored;
  if (options.ignore_errors) ignored = std::make_shared<data::IgnoredErrors>();
  const auto shard = sharding(options, elastic);

  // --train-examples N takes the first N in the files' order, the same examples every epoch
  // (as from the IDX files), so the files are then read in order and only the N shuffled.
  Source train = open_source(parse_spec("--train-data", options.train_data), options,
                             /*shuffle_files=*/options.train_examples <= 0);
  check_enough_files(train, "--train-data", options.train_data, shard, workers);
  const ExampleDecoder decoder = check_first_image(train, options, "--train-data");
  // Under --ignore-errors the count is what the files hold, bad records included.
  const int64_t num_train = readable(train, options.train_examples, nullptr).cardinality();
  // Encoded items are shuffled (a bounded buffer: memory does not grow with the data), then
  // decoded on the decoding threads in that order.
  const int64_t buffer = std::min(options.shuffle_buffer, std::max<int64_t>(num_train, 1));
  Dataset train_batches =
      decoded(readable(train, options.train_examples, ignored).shuffle(buffer, options.seed), train,
              decoder, options, ignored)
          .batch(global_batch)
          .prefetch(2)
          .with_options(shard);

  Source test = open_source(parse_spec("--test-data", options.test_data), options, false);
  check_enough_files(test, "--test-data", options.test_data, shard, workers);
  check_first_image(test, options, "--test-data");
  Dataset test_batches =
      decoded(readable(test, options.test_examples, ignored), test, decoder, options, ignored)
          .batch(global_batch)
          .prefetch(2)
          .with_options(shard);
  return {train_batches, test_batches, num_train,
          "train: " + train.description + "; test: " + test.description, ignored};
}

}  // namespace dist::tools
