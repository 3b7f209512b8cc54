#include "training_data.h"

#include <algorithm>
#include <tuple>

#include "data_sources.h"
#include "dist/core/error.h"
#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/image_codec.h"
#include "dist/data/image_example.h"
#include "dist/data/image_folder.h"
#include "dist/data/image_transforms.h"
#include "dist/data/mnist.h"
#include "dist/data/tfrecord_dataset.h"
#include "feature_data.h"

namespace dist::tools {
namespace {

using data::Dataset;
using data::Element;

// Fashion-MNIST's classes.
constexpr int64_t kFashionMnistClasses = 10;

// An item of a source ({image, label, file, record}, see Unpack) to
// {float image [C, H, W], label}, made ready by the preparation and its label checked.
struct ExampleDecoder {
  ImagePreparation prepare;
  int64_t classes = 0;
  std::string classes_source;
  bool training = false;

  // The channels Unpack decodes to: 0 as stored, else 1 or 3.
  int64_t channels() const { return prepare.channels_chosen ? prepare.channels : 0; }

  Element operator()(const Element& example, const data::ElementContext& context) const {
    const ExampleSource source{example[2], example[3].item<int64_t>()};
    try {
      const at::Tensor& image = example[0];
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

// A source's item to {image uint8 [C, H, W] decoded to `channels` (0: as stored), int64 label,
// file, int64 record index (-1 for an image file)}: the image folder's decoded, a TFRecord's
// parsed once as an image example (data::ImageExampleParser, raw pixels included). A bad
// item's DataError names it.
using Unpack = std::function<Element(const Element&, int64_t channels)>;

struct Source {
  DataSpec spec;
  Dataset items;            // image files {encoded, label, path} or records {record, file, index}
  Unpack unpack;            // an item to the example, as above
  std::string description;  // for the job's header
  int64_t file_count = 0;   // the files kFile divides: TFRecord files, or the folder's images
};

Source open_source(const DataSpec& spec, const TrainOptions& options, bool shuffle_files) {
  if (spec.kind == DataSpec::Kind::kImages) {
    Dataset files = data::image_folder_files(spec.location, {shuffle_files, options.seed, true});
    const at::Tensor no_record = at::scalar_tensor(-1, at::kLong);
    Unpack decode = [no_record](const Element& e, int64_t channels) {
      try {
        return Element{data::decode_image(e[0], {channels, 0, 0, true}), e[1], e[2], no_record};
      } catch (const DataError& error) {
        throw DataError(ExampleSource{e[2], -1}() + ": " + error.what());
      }
    };
    return {spec, files, decode, "image folder " + spec.location, data::source_file_count(files)};
  }
  Records records = open_records(spec, options, shuffle_files);
  const data::ImageExampleParser parser({options.image_feature, options.label_feature});
  Unpack parse = [parser](const Element& e, int64_t channels) {
    try {
      Element parsed = parser.parse(data::bytes_view(e[0]), {channels, 0, 0, true});
      return Element{parsed[0], parsed[1], e[1], e[2]};
    } catch (const DataError& error) {
      throw DataError(ExampleSource{e[1], e[2].item<int64_t>()}() + ": " + error.what());
    }
  };
  return {spec, records.items, parse, records.description, records.file_count};
}

// The first image of a source as stored; DataError (exit 3) when it has none.
at::Tensor first_image(const Source& source, const TrainOptions& options, const std::string& flag) {
  // Under --ignore-errors a bad first record is skipped here too (counted later, by the job's
  // own pass, not twice).
  const auto skipped = options.ignore_errors ? std::make_shared<data::IgnoredErrors>() : nullptr;
  Dataset images =
      readable(source.items, skipped).map([unpack = source.unpack](const Element& item) {
        return Element{unpack(item, 0)[0]};
      });
  auto first = readable(images, skipped).iterator().next();
  // No data is missing data (exit 3), as dist-train.md's exit codes say.
  DIST_CHECK(first.has_value(), DataError, flag, " has no examples: its files are empty",
             options.ignore_errors ? " or none of their records can be used" : "",
             "; give files with records or images");
  return (*first)[0];
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
  std::tie(shape.classes, shape.classes_source) = count_record_classes(
      train.items, test.spec.kind == DataSpec::Kind::kTFRecord ? &test.items : nullptr, options);
}

bool images_as_stored(const TrainOptions& options, const ImagePreparation& prepare) {
  return prepare.channels == 1 && prepare.height == 28 && prepare.width == 28 &&
         !options.images.flip && !options.images.crop && !options.images.normalized();
}

TrainingData fashion_mnist_data(const TrainOptions& options, const ImagePreparation& prepare,
                                int64_t global_batch) {
  // Bytes until batched: a shuffle over the whole set holds views of 47 MB, not 188 MB.
  // Only the examples the job takes are read (--train-examples, --test-examples).
  Dataset examples = data::fashion_mnist_bytes(options.data_dir, data::Split::kTrain,
                                               Env::Default(), options.train_examples);
  const int64_t num_train = examples.cardinality();
  Dataset test = data::fashion_mnist_bytes(options.data_dir, data::Split::kTest, Env::Default(),
                                           options.test_examples);
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
        return decoder(unpack(item, decoder.channels()), context);
      },
      data::MapOptions{decode_threads(options)});
  return readable(images, ignored);
}

}  // namespace

DataShape inspect_training_data(const TrainOptions& options) {
  DataShape shape;
  if (options.task.uses_features()) {
    DIST_CHECK_ARG(!options.test_data.empty(),
                   "--features needs --test-data too (the records to evaluate on after each "
                   "epoch)");
    inspect_features(options, shape);
  } else if (options.train_data.empty()) {
    shape.first = data::fashion_mnist_bytes(options.data_dir, data::Split::kTrain, Env::Default(),
                                            /*max_examples=*/1)
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
  if (options.task.uses_features())
    return open_feature_data(options, shape, global_batch, workers, elastic);
  if (options.train_data.empty()) return fashion_mnist_data(options, prepare, global_batch);
  std::shared_ptr<data::IgnoredErrors> ignored;
  if (options.ignore_errors) ignored = std::make_shared<data::IgnoredErrors>();
  const auto shard = sharding(options, elastic);

  // --train-examples N takes the first N in the files' order, the same examples every epoch
  // (as from the IDX files), so the files are then read in order and only the N shuffled.
  Source train = open_source(parse_spec("--train-data", options.train_data), options,
                             /*shuffle_files=*/options.train_examples <= 0);
  check_enough_files(train.file_count, "--train-data", options.train_data, shard, workers);
  // Under --ignore-errors the count is what the files hold, bad records included.
  const int64_t num_train = first_n(train.items, options.train_examples).cardinality();
  // Encoded items are shuffled (a bounded buffer: memory does not grow with the data), then
  // decoded on the decoding threads in that order, each image's augmentation keyed by its place
  // in that order.
  const int64_t buffer = std::min(options.shuffle_buffer, std::max<int64_t>(num_train, 1));
  const ExampleDecoder train_decoder{prepare, shape.classes, shape.classes_source, true};
  const Dataset train_examples = prepared_examples(
      readable(first_n(train.items, options.train_examples), ignored).shuffle(buffer, options.seed),
      train, train_decoder, options, ignored);

  Source test = open_source(parse_spec("--test-data", options.test_data), options, false);
  check_enough_files(test.file_count, "--test-data", options.test_data, shard, workers);
  const ExampleDecoder test_decoder{prepare, shape.classes, shape.classes_source, false};
  const Dataset test_examples =
      prepared_examples(readable(first_n(test.items, options.test_examples), ignored), test,
                        test_decoder, options, ignored);
  return {global_batches(train_examples, global_batch, shard),
          global_batches(test_examples, global_batch, shard),
          num_train,
          "train: " + train.description + "; test: " + test.description,
          describe_sharding(train.file_count, shard, workers),
          ignored};
}

}  // namespace dist::tools
