// dist-train on tabular TFRecords (issue 69, item 4): rows of named features (--features) and a
// label that is a class (--task classify) or numbers to predict (--task regress), with a small
// MLP written in Python and scripted (tests/tools/tabular_features.py) or the built-in mlp;
// Python reads the trained module back to the test loss dist-train printed, N replicas and N
// workers reach one device's weights, and bad features are named before training. Real
// processes on 127.0.0.1, bounded in time.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/data/example.h"
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

const std::string kFeaturesScript =
    std::string(DIST_SOURCE_DIR) + "/tests/tools/tabular_features.py";

using testing::run_program;

void write_raw(const std::string& path, const at::Tensor& values) {
  const at::Tensor flat = values.contiguous().to(at::kFloat);
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(flat.data_ptr()),
            static_cast<std::streamsize>(flat.numel() * sizeof(float)));
}

// Rows of eight float features "x" in [0, 1) and two int64 "bucket" in 0..3, the target "y"
// (Friedman's function #1 of x, plus the first bucket, plus noise of deviation 0.5) and its
// tercile "class" (0, 1, 2): DIR/train-{0..3}.tfrecord (2,000 rows), DIR/test.tfrecord (400
// rows, also as raw float32 files for Python), and the scripted models of tabular_features.py.
struct TabularData {
  testing::TempDir dir;
  at::Tensor test_rows, test_y;

  TabularData() {
    torch::manual_seed(11);
    write("train", 2000, 4);
    std::tie(test_rows, test_y) = write("test", 400, 1);
    write_raw(dir.file("test_rows.f32"), test_rows);
    write_raw(dir.file("test_y.f32"), test_y);
    const auto made = run_program(DIST_TORCH_PYTHON, {kFeaturesScript, "make", dir.path()}, 120s);
    EXPECT_EQ(made.exit_code, 0) << made.output;
  }
  std::string train() const { return "tfrecord:" + dir.file("train-*.tfrecord"); }
  std::string test() const { return "tfrecord:" + dir.file("test*.tfrecord"); }
  std::string model(const std::string& name) const { return dir.file(name + ".pt"); }

  // Returns the rows as the model takes them (x then bucket, as floats) and the targets.
  std::pair<at::Tensor, at::Tensor> write(const std::string& split, int64_t rows, int shards) {
    const at::Tensor x = torch::rand({rows, 8});
    const at::Tensor bucket = torch::randint(0, 4, {rows, 2}, torch::kLong);
    const at::Tensor y = 10 * torch::sin(M_PI * x.select(1, 0) * x.select(1, 1)) +
                         20 * (x.select(1, 2) - 0.5).square() + 10 * x.select(1, 3) +
                         5 * x.select(1, 4) + bucket.select(1, 0).to(at::kFloat) +
                         0.5 * torch::randn({rows});
    std::vector<std::unique_ptr<data::TFRecordWriter>> writers;
    for (int s = 0; s < shards; ++s)
      writers.push_back(std::make_unique<data::TFRecordWriter>(
          dir.file(split + (shards > 1 ? "-" + std::to_string(s) : "") + ".tfrecord")));
    for (int64_t i = 0; i < rows; ++i) {
      const float value = y[i].item<float>();
      data::ExampleBuilder example;
      example.add_float("x",
                        std::vector<float>(x[i].data_ptr<float>(), x[i].data_ptr<float>() + 8));
      example.add_int64("bucket", std::vector<int64_t>{bucket[i][0].item<int64_t>(),
                                                       bucket[i][1].item<int64_t>()});
      example.add_float("y", value);
      example.add_int64("class", value < 12 ? 0 : value < 17 ? 1 : 2);
      writers[i % shards]->write(example.serialize());
    }
    for (auto& w : writers) w->close();
    return {at::cat({x, bucket.to(at::kFloat)}, 1), y};
  }
};

std::vector<std::string> regression(const TabularData& data, const std::string& strategy,
                                    std::vector<std::string> more) {
  std::vector<std::string> args{"--strategy",
                                strategy,
                                "--train-data",
                                data.train(),
                                "--test-data",
                                data.test(),
                                "--task",
                                "regress",
                                "--features",
                                "x,bucket",
                                "--label-feature",
                                "y",
                                "--model-file",
                                data.model("regress"),
                                "--global-batch",
                                "32",
                                "--seed",
                                "5",
                                "--no-progress",
                                "--decode-threads",
                                "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(DistTrainFeaturesTest, ARegressionOnTabularRecordsLearnsAndPythonReadsItBack) {
  TabularData data;
  const std::string trained = data.dir.file("trained.pt");
  const auto result = testing::run_dist_train_alone(regression(
      data, "mirrored", {"--epochs", "20", "--lr", "0.01", "--save-torchscript", trained}));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* line : {"Features: x (8 float), bucket (2 int64) -> rows of 10",
                           "Task: regress the 1 value of --label-feature 'y'",
                           "(rows (None, 10) -> 1 values)", " - mae "})
    EXPECT_TRUE(testing::contains(result.output, line)) << line << " not in\n" << result.output;
  const auto printed = testing::last_json(result.output);
  ASSERT_FALSE(printed.is_null()) << result.output;
  const double ours = printed["test_loss"].get<double>();
  // Predicting the mean scores the targets' variance; the noise alone scores 0.25.
  const double variance = data.test_y.var(/*unbiased=*/false).item<double>();
  EXPECT_LT(ours, 0.3 * variance) << result.output;
  EXPECT_GT(printed["test_mae"].get<double>(), 0) << result.output;
  const auto python = run_program(DIST_TORCH_PYTHON,
                                  {kFeaturesScript, "evaluate", trained,
                                   data.dir.file("test_rows.f32"), data.dir.file("test_y.f32")},
                                  120s);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  const double theirs = testing::last_json(python.output)["mse"].get<double>();
  std::printf("test MSE: dist-train %.5f, Python %.5f (variance %.3f)\n", ours, theirs, variance);
  EXPECT_NEAR(ours, theirs, 1e-4 * theirs);
}

// 20 SGD steps: one device's batches for any replicas and workers.
TEST(DistTrainFeaturesTest, RegressionOnReplicasAndWorkersReachesOneDevice) {
  TabularData data;
  auto job = [&](const std::string& strategy, const std::string& weights) {
    return regression(data, strategy,
                      {"--optimizer", "sgd", "--lr", "0.01", "--max-steps", "20", "--epochs", "2",
                       "--auto-shard", "data", "--save-weights", weights});
  };
  const std::string one = data.dir.file("one.safetensors");
  const auto alone = testing::run_dist_train_alone(job("one_device", one));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  const std::string mirrored = data.dir.file("mirrored.safetensors");
  const auto replicas = testing::run_dist_train_alone(
      testing::with_flag(job("mirrored", mirrored), "--replicas", "2"));
  ASSERT_EQ(replicas.exit_code, 0) << replicas.output;
  EXPECT_LE(testing::max_relative_difference(one, mirrored), 1e-5);
  const std::string workers = data.dir.file("workers.safetensors");
  std::vector<std::string> args{"--workers", "2", "--", DIST_TRAIN_BINARY};
  const auto worker_job = job("multi_worker", workers);
  args.insert(args.end(), worker_job.begin(), worker_job.end());
  testing::expect_workers_reached(testing::launch_job(args), "TF_CONFIG", 2, 2, workers, one);
}

// The built-in mlp (the default with --features) classifies the rows under fit.
TEST(DistTrainFeaturesTest, ClassesFromFeaturesTrainTheBuiltInMlpUnderFit) {
  TabularData data;
  const auto result = testing::run_dist_train_alone({"--loop",
                                                     "fit",
                                                     "--strategy",
                                                     "mirrored",
                                                     "--train-data",
                                                     data.train(),
                                                     "--test-data",
                                                     data.test(),
                                                     "--features",
                                                     "x,bucket",
                                                     "--label-feature",
                                                     "class",
                                                     "--global-batch",
                                                     "64",
                                                     "--train-examples",
                                                     "1024",
                                                     "--epochs",
                                                     "2",
                                                     "--no-progress",
                                                     "--decode-threads",
                                                     "1"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(testing::contains(result.output, "Classes: 3 (the largest label of --train-data, 2"))
      << result.output;
  const auto printed = testing::last_json(result.output);
  ASSERT_FALSE(printed.is_null()) << result.output;
  // Better than always answering the test set's most frequent class.
  const at::Tensor classes = (data.test_y >= 12).to(at::kLong) + (data.test_y >= 17).to(at::kLong);
  const double majority =
      at::bincount(classes).max().item<double>() / static_cast<double>(classes.numel());
  EXPECT_GT(printed["test_accuracy"].get<double>(), majority + 0.1) << result.output;
}

void expect_exit(const ProcessResult& result, int code, const std::string& says) {
  EXPECT_EQ(result.exit_code, code) << result.output;
  EXPECT_TRUE(testing::contains(result.output, says)) << says << " not in:\n" << result.output;
  EXPECT_FALSE(testing::contains(result.output, "Epoch 1")) << result.output;
}

// One refusal of each kind as a dist-train process (of the data: exit 3; of the model file as
// the job starts, and of the flags as they are parsed: exit 2); the others through dist-train's
// checks in this process (testing::dist_train_checks).
TEST(DistTrainFeaturesTest, BadFeaturesAreNamedBeforeTraining) {
  TabularData data;
  // The regression with these flags given or replaced.
  auto args_with = [&](const std::vector<std::string>& flags) {
    auto args = regression(data, "one_device", {});
    for (size_t i = 0; i + 1 < flags.size(); i += 2)
      args = testing::with_flag(args, flags[i], flags[i + 1]);
    return args;
  };
  auto job = [&](const std::vector<std::string>& flags) {
    return testing::dist_train_checks(args_with(flags));
  };
  auto job_process = [&](const std::vector<std::string>& flags) {
    return testing::run_dist_train_alone(args_with(flags));
  };
  // A feature the records lack: named, with the features they have.
  const auto lacking = job_process({"--features", "x,age"});
  expect_exit(lacking, 3, "--features 'age' in record 0 of");
  expect_exit(lacking, 3, "(the example has: bucket, class, x, y)");
  // The wrong label, the wrong outputs, a model that cannot take the rows.
  expect_exit(job({"--label-feature", "z"}), 3, "--label-feature 'z'");
  expect_exit(job_process({"--model-file", data.model("classify")}), 2,
              "returns 3 values per example but --label-feature 'y' has 1");
  expect_exit(testing::dist_train_checks({"--train-data", data.train(), "--test-data", data.test(),
                                          "--features", "bucket", "--label-feature", "class",
                                          "--epochs", "1", "--no-progress"}),
              2, "are all int64, which the built-in models cannot take");
  expect_exit(
      testing::dist_train_checks({"--train-data", data.train(), "--test-data", data.test(),
                                  "--features", "x", "--model", "cnn", "--label-feature", "class"}),
      2, "--model cnn takes images, not the rows of --features");
  // Flags that do not go together.
  expect_exit(job({"--image-size", "8x8"}), 2, "apply to images, not to --features x,bucket");
  expect_exit(testing::dist_train_checks({"--task", "regress", "--epochs", "1"}), 2,
              "--task regress predicts values from --features");
  expect_exit(job({"--num-classes", "4"}), 2, "--num-classes 4 applies to --task classify");
  expect_exit(job({"--features", "x,,y"}), 2, "names an empty feature");
  expect_exit(job_process({"--task", "sort"}), 2, "unknown --task 'sort'");
  expect_exit(testing::dist_train_checks({"--features", "x", "--epochs", "1"}), 2,
              "give --train-data tfrecord:GLOB");
  // A record whose feature has another length than the first's: named when it is read.
  {
    data::TFRecordWriter odd(data.dir.file("odd.tfrecord"));
    data::ExampleBuilder good, short_row;
    good.add_float("x", std::vector<float>(8, 0.5f)).add_int64("bucket", {1, 2}).add_float("y", 1);
    short_row.add_float("x", std::vector<float>(5, 0.5f))
        .add_int64("bucket", {1, 2})
        .add_float("y", 1);
    odd.write(good.serialize());
    odd.write(short_row.serialize());
    odd.close();
  }
  const auto odd = testing::run_dist_train_alone(
      testing::with_flag(regression(data, "one_device", {"--epochs", "1"}), "--test-data",
                         "tfrecord:" + data.dir.file("odd.tfrecord")));
  EXPECT_EQ(odd.exit_code, 3) << odd.output;
  EXPECT_TRUE(testing::contains(odd.output, "record 1 of")) << odd.output;
  EXPECT_TRUE(testing::contains(odd.output, "'x'")) << odd.output;
}

}  // namespace
}  // namespace dist
