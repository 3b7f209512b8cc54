// dist-train with a user's images as they come (issue 69): a folder of colour images of mixed
// sizes and kinds in 5 classes, and a CNN for 3x64x64 images and 5 classes written in Python and
// scripted (tests/tools/new_user_images.py writes both), trained with no conversion step in one
// process and on two workers, the result read back by Python's torchvision to the accuracy
// dist-train printed; the same pipeline with augmentation on N replicas and N workers equal to
// one device; and the bad inputs of such folders named before training. Real processes on
// 127.0.0.1, bounded in time.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "dist/data/example.h"
#include "dist/data/files.h"
#include "dist/data/image_folder.h"
#include "dist/data/tfrecord.h"
#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;

const std::string kImagesScript = std::string(DIST_SOURCE_DIR) + "/tests/tools/new_user_images.py";
const std::string kImageNetMeans = "0.485,0.456,0.406";
const std::string kImageNetStds = "0.229,0.224,0.225";

using testing::run_program;

// The user's data: DIR/data/{train,test}/<class>/ and DIR/data/cnn5.pt.
struct UserImages {
  testing::TempDir dir;
  std::string root = dir.file("data");
  UserImages() {
    const auto made = run_program(DIST_TORCH_PYTHON, {kImagesScript, "make", root}, 120s);
    EXPECT_EQ(made.exit_code, 0) << made.output;
  }
  std::string train() const { return "images:" + root + "/train"; }
  std::string test() const { return "images:" + root + "/test"; }
  std::string model() const { return root + "/cnn5.pt"; }

  // The folder `split` as `shards` TFRecord files of tf.train.Example (the encoded image as
  // stored, its int64 label), DIR/<split>-N.tfrecord; returns the tfrecord: spec.
  std::string as_tfrecords(const std::string& split, int shards) const {
    std::vector<std::unique_ptr<data::TFRecordWriter>> writers;
    for (int s = 0; s < shards; ++s)
      writers.push_back(std::make_unique<data::TFRecordWriter>(
          dir.file(split + "-" + std::to_string(s) + ".tfrecord")));
    int64_t index = 0;
    for (const auto& e : data::image_folder_files(root + "/" + split).iterator()) {
      data::ExampleBuilder example;
      example.add_bytes("image/encoded", data::bytes_view(e[0]));
      example.add_int64("image/class/label", e[1].item<int64_t>());
      writers[index++ % shards]->write(example.serialize());
    }
    for (auto& w : writers) w->close();
    return "tfrecord:" + dir.file(split + "-*.tfrecord");
  }
};

// The new user's command: the scripted model on 64x64 images, augmented and normalized.
std::vector<std::string> user_job(const std::string& strategy, const std::string& train,
                                  const std::string& test, const std::string& model,
                                  const std::string& trained) {
  return {
      "--strategy",   strategy,   "--train-data", train,   "--test-data",    test,
      "--model-file", model,      "--image-size", "64x64", "--augment",      "flip,crop",
      "--normalize",  "imagenet", "--epochs",     "10",    "--global-batch", "20",
      "--lr",         "0.003",    "--seed",       "3",     "--no-progress",  "--save-torchscript",
      trained};
}

// Python's accuracy of `trained` on the test folder, its images prepared by torchvision.
double python_accuracy(const UserImages& data, const std::string& trained) {
  const auto run = run_program(DIST_TORCH_PYTHON,
                               {kImagesScript, "evaluate", trained, data.root + "/test", "64x64",
                                kImageNetMeans, kImageNetStds},
                               120s);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto answer = testing::last_json(run.output);
  if (answer.is_null()) return -1;
  return answer["accuracy"].get<double>();
}

// The job trained and Python read the module back to the accuracy it printed (the images of
// the test folder are RGB JPEGs, decoded alike; the resize matches PIL's within a grey level,
// so at most one of the 60 predictions may differ).
void expect_python_reads_back(const UserImages& data, const ProcessResult& result,
                              const std::string& trained, const std::string& prefix = "") {
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto printed = testing::last_json(result.output, prefix);
  ASSERT_FALSE(printed.is_null()) << result.output;
  const double ours = printed["test_accuracy"].get<double>();
  EXPECT_GT(ours, 0.45) << "5 classes: chance is 0.2\n" << result.output;
  const double theirs = python_accuracy(data, trained);
  std::printf("dist-train's test accuracy %.4f, Python's %.4f\n", ours, theirs);
  EXPECT_LE(std::abs(ours - theirs), 1.0 / 60 + 1e-9) << result.output;
}

TEST(DistTrainImagesTest, TheNewUsersColourFolderAndScriptedModelTrainInOneProcess) {
  UserImages data;
  const std::string trained = data.dir.file("trained.pt");
  const auto result = testing::run_dist_train_alone(
      user_job("mirrored", data.train(), data.test(), data.model(), trained));
  EXPECT_TRUE(testing::contains(result.output,
                                "Images: 3x64x64 (resized, antialiased); "
                                "--augment flip,crop (training)"))
      << result.output;
  EXPECT_TRUE(testing::contains(result.output, "Classes: 5 (the 5 class folders")) << result.output;
  EXPECT_TRUE(testing::contains(result.output, "3, 64, 64) -> 5 logits")) << result.output;
  expect_python_reads_back(data, result, trained);
}

TEST(DistTrainImagesTest, TheSameImagesAsTFRecordShardsTrainOnTwoWorkers) {
  UserImages data;
  const std::string train = data.as_tfrecords("train", 4);
  const std::string test = data.as_tfrecords("test", 2);
  const std::string trained = data.dir.file("trained.pt");
  std::vector<std::string> args{"--workers", "2", "--", DIST_TRAIN_BINARY};
  const auto job = user_job("multi_worker", train, test, data.model(), trained);
  args.insert(args.end(), job.begin(), job.end());
  const auto result = testing::launch_job(args);
  EXPECT_TRUE(testing::contains(result.output, "Classes: 5 (the largest label of --train-data, 4"))
      << result.output;
  EXPECT_TRUE(testing::contains(result.output,
                                "Sharding: --auto-shard file: each of the 2 workers reads its "
                                "own 2 of the 4 files"))
      << result.output;
  expect_python_reads_back(data, result, trained, "[worker:0] ");
}

// dist-train's flags for 20 SGD steps of a scripted CNN on the colour folder at 32x32 with
// augmentation on, the weights saved: one device's batches for any replicas and workers. The
// CNN has no max-pooling: float32 max-pooling over the flat regions that upscaled crops make
// routes gradients by exact ties, which one device's batch and a replica's half (differently
// blocked convolutions) break differently after about 10 steps (measured: 1.6e-5 at step 10 and
// 9e-5 at 20 with the built-in cnn, 3e-8 without augmentation, 1e-8 for the mlp).
std::vector<std::string> augmented_job(const UserImages& data, const std::string& strategy,
                                       const std::string& weights) {
  return {"--strategy",
          strategy,
          "--train-data",
          data.train(),
          "--test-data",
          data.test(),
          "--model-file",
          data.root + "/strided_cnn5.pt",
          "--image-size",
          "32x32",
          "--augment",
          "flip,crop",
          "--normalize",
          "0.5,0.5,0.5/0.25,0.25,0.25",
          "--optimizer",
          "sgd",
          "--lr",
          "0.05",
          "--global-batch",
          "16",
          "--max-steps",
          "20",
          "--epochs",
          "2",
          "--seed",
          "7",
          "--auto-shard",
          "data",
          "--decode-threads",
          "1",
          "--no-progress",
          "--save-weights",
          weights};
}

TEST(DistTrainImagesTest, AugmentedColourBatchesOnReplicasAndWorkersReachOneDevice) {
  UserImages data;
  const std::string one = data.dir.file("one.safetensors");
  auto alone = testing::run_dist_train_alone(augmented_job(data, "one_device", one));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;

  const std::string mirrored = data.dir.file("mirrored.safetensors");
  auto replicas = testing::run_dist_train_alone(
      testing::with_flag(augmented_job(data, "mirrored", mirrored), "--replicas", "2"));
  ASSERT_EQ(replicas.exit_code, 0) << replicas.output;
  EXPECT_LE(testing::max_relative_difference(one, mirrored), 1e-5);

  const std::string workers = data.dir.file("workers.safetensors");
  std::vector<std::string> args{"--workers", "2", "--", DIST_TRAIN_BINARY};
  const auto job = augmented_job(data, "multi_worker", workers);
  args.insert(args.end(), job.begin(), job.end());
  auto launched = testing::launch_job(args);
  testing::expect_workers_reached(launched, "TF_CONFIG", 2, 2, workers, one);
}

TEST(DistTrainImagesTest, AnAugmentedJobStoppedMidEpochResumesBitForBit) {
  UserImages data;
  const std::string whole = data.dir.file("whole.safetensors");
  ASSERT_EQ(testing::run_dist_train_alone(augmented_job(data, "mirrored", whole)).exit_code, 0);
  const std::string resumed = data.dir.file("resumed.safetensors");
  auto args = testing::with_flag(augmented_job(data, "mirrored", resumed), "--checkpoint-dir",
                                 data.dir.file("checkpoints"));
  auto first = testing::run_dist_train_alone(testing::with_flag(args, "--max-steps", "7"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto second = testing::run_dist_train_alone(args);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(testing::contains(second.output, "step 7")) << second.output;
  testing::expect_same_weights(whole, resumed);
}

// Exited with `code` in the first epoch (before training when the start-up can know:
// `before_training`), saying each of `says`. An image's size and kind are known when it is
// decoded: a folder is not read twice to find them first.
void expect_refused(const ProcessResult& result, int code, const std::vector<std::string>& says,
                    bool before_training = false) {
  EXPECT_EQ(result.exit_code, code) << result.output;
  for (const auto& text : says)
    EXPECT_TRUE(testing::contains(result.output, text)) << text << " not in:\n" << result.output;
  EXPECT_FALSE(testing::contains(result.output, before_training ? "Epoch 1" : "Epoch 1:"))
      << result.output;
}

std::vector<std::string> small_job(const UserImages& data, std::vector<std::string> more) {
  std::vector<std::string> args{"--strategy",
                                "one_device",
                                "--train-data",
                                data.train(),
                                "--test-data",
                                data.test(),
                                "--epochs",
                                "1",
                                "--global-batch",
                                "20",
                                "--no-progress",
                                "--decode-threads",
                                "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(DistTrainImagesTest, BadImageFoldersAreNamedBeforeTraining) {
  UserImages data;
  // Mixed sizes without --image-size: the file and the flag named.
  expect_refused(
      testing::run_dist_train_alone(small_job(data, {"--channels", "3", "--model", "resnet"})), 3,
      {"--image-size", "but the data's first image is"});
  // Grey and colour mixed, the channels taken from the first image: named, --channels advised.
  expect_refused(testing::run_dist_train_alone(small_job(data, {"--image-size", "32x32"})), 3,
                 {"the data mixes grey and colour images", "--channels"});
  // A module of 5 classes asked for 7: both counts and where each came from.
  expect_refused(
      testing::run_dist_train_alone(small_job(
          data, {"--model-file", data.model(), "--image-size", "64x64", "--num-classes", "7"})),
      2, {"returns 5 logits", "7 classes (--num-classes)"}, /*before_training=*/true);
  // A corrupt image among good ones: named (exit 3), or skipped and counted.
  testing::write_file(data.root + "/train/circle/001.jpg", "not an image at all");
  const auto named =
      testing::run_dist_train_alone(small_job(data, {"--channels", "3", "--image-size", "32x32"}));
  EXPECT_EQ(named.exit_code, 3) << named.output;
  EXPECT_TRUE(testing::contains(named.output, "circle/001.jpg")) << named.output;
  const auto skipped = testing::run_dist_train_alone(
      small_job(data, {"--channels", "3", "--image-size", "32x32", "--ignore-errors"}));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_TRUE(testing::contains(skipped.output, "Skipped (--ignore-errors): 1 ")) << skipped.output;
}

}  // namespace
}  // namespace dist
