// Model::fit under ParameterServerStrategy: jobs of real processes on 127.0.0.1
// (ps_fit_task_main.cc runs as chief, worker and ps, each calling fit), every one bounded in
// time; and the refusal of a fit without steps_per_epoch.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <torch/torch.h>

#include "dist/distribute/local_cluster.h"
#include "dist/distribute/one_device_strategy.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "dist/keras/model.h"
#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "keras_test_models.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::keras {
namespace {

using namespace std::chrono_literals;

// A job of one chief, `workers` workers and one ps task, each running the fit task with
// `args`; the ps task first, the chief last. Whatever still runs at the end is killed.
struct FitJob {
  FitJob(int workers, const std::vector<std::string>& args,
         const std::vector<std::string>& env = {})
      : cluster({{"chief", 1}, {"worker", workers}, {"ps", 1}}) {
    start("ps", 0, args, env);
    for (int i = 0; i < workers; ++i) start("worker", i, args, env);
    start("chief", 0, args, env);
  }
  void start(const std::string& type, int index, const std::vector<std::string>& args,
             std::vector<std::string> env) {
    env.push_back("TF_CONFIG=" + cluster.tf_config(type, index));
    env.push_back("DIST_TEST_TIMEOUT_MS=20000");
    processes.start(DIST_TEST_PS_FIT_TASK_BINARY, args, env);
  }
  // Every process's exit code and output, for failure messages.
  static std::string describe(const std::vector<testing::ProcessResult>& results) {
    std::string out;
    for (size_t i = 0; i < results.size(); ++i)
      out += "--- process " + std::to_string(i) + " (exit " + std::to_string(results[i].exit_code) +
             ")\n" + results[i].output;
    return out;
  }
  LocalJob cluster;
  testing::WorkerProcesses processes;
};

// "history <key> <epoch> <value>" lines of the chief's output.
std::map<std::string, std::vector<double>> parse_history(const std::string& output) {
  std::map<std::string, std::vector<double>> history;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string tag, key;
    size_t epoch = 0;
    double value = 0;
    if (words >> tag >> key >> epoch >> value && tag == "history") history[key].push_back(value);
  }
  return history;
}

// The model every task of ps_fit_task_main.cc fits (seed 7), compiled the same way on one
// device: the reference the jobs' weights and losses are compared with.
Model task_model_on_one_device() {
  torch::manual_seed(7);
  Model model = testing::keras_tutorial_cnn();
  model.compile(OneDeviceStrategy("cpu:0"), optimizers::SGD(0.1),
                SparseCategoricalCrossentropy(true), {"accuracy"});
  return model;
}

// One worker and one ps: the worker runs the steps one after another on the same batches as
// one device (its copy of the data starts at the beginning), so fit's weights and every
// epoch's logs, validation included, equal fit on one device within float noise.
TEST(KerasFitUnderParameterServersTest, OneWorkerOnePsReproducesFitOnOneDevice) {
  testing::TempDir dir;
  FitJob job(1, {"2", "20", dir.file("w.safetensors")});
  const auto results = job.processes.wait_all(120s);
  const std::string all = FitJob::describe(results);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all;
  // ps and worker: fit served the chief and returned an empty History.
  EXPECT_NE(results[0].output.find("served; history epochs 0"), std::string::npos) << all;
  EXPECT_NE(results[1].output.find("served; history epochs 0"), std::string::npos) << all;
  EXPECT_NE(results[2].output.find("global step 40"), std::string::npos) << all;

  Model reference = task_model_on_one_device();
  const auto initial = testing::weight_values(reference);
  FitOptions fit;
  fit.epochs = 2;
  fit.verbose = 0;
  fit.validation_data = testing::equivalence_data();
  const History expected = reference.fit(testing::equivalence_data(), fit);

  const auto file = load_safetensors(dir.file("w.safetensors"));
  const auto expected_weights = reference.weights();
  ASSERT_EQ(file.tensors.size(), expected_weights.size());
  std::vector<torch::Tensor> trained, wanted;
  for (size_t i = 0; i < expected_weights.size(); ++i) {
    EXPECT_EQ(file.tensors[i].first, expected_weights[i].first);
    trained.push_back(file.tensors[i].second);
    wanted.push_back(expected_weights[i].second);
  }
  const double diff = testing::max_relative_difference(trained, wanted);
  std::printf(
      "fit, 1 worker + 1 ps vs one device, 2 epochs of 20 SGD steps: max relative "
      "difference %.3g\n",
      diff);
  EXPECT_LT(diff, 1e-6);
  EXPECT_GT(testing::max_relative_difference(trained, initial), 1e-3);  // training moved them

  // The logs come from the workers' steps (loss, accuracy) and the chief's validation.
  const auto history = parse_history(results[2].output);
  for (const std::string key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    ASSERT_EQ(history.count(key), 1u) << key << "\n" << all;
    ASSERT_EQ(history.at(key).size(), 2u) << key;
    for (size_t e = 0; e < 2; ++e) {
      const double want = expected.history.at(key)[e];
      EXPECT_NEAR(history.at(key)[e], want, 1e-6 * std::abs(want)) << key << " epoch " << e;
    }
  }
}

// Two workers take the steps asynchronously: all of them are counted, and the logs are real.
// The data has random labels, so the mean training loss of an epoch need not fall from one
// epoch to the next (it did not in one run: 2.29766 then 2.29822); what 30 steps of SGD must do
// is move the weights and lower the loss on the data they trained on, which the chief's
// validation (the same data) measures against the untrained model's.
TEST(KerasFitUnderParameterServersTest, TwoWorkersTakeEveryScheduledStep) {
  testing::TempDir dir;
  FitJob job(2, {"2", "15", dir.file("w.safetensors")});
  const auto results = job.processes.wait_all(120s);
  const std::string all = FitJob::describe(results);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all;
  const std::string& chief = results[3].output;
  EXPECT_NE(chief.find("global step 30"), std::string::npos) << all;
  const auto history = parse_history(chief);
  ASSERT_EQ(history.count("loss"), 1u) << all;
  ASSERT_EQ(history.at("loss").size(), 2u);
  for (double loss : history.at("loss")) EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  for (double accuracy : history.at("accuracy")) EXPECT_TRUE(accuracy >= 0 && accuracy <= 1);

  Model untrained = task_model_on_one_device();
  const auto initial = testing::weight_values(untrained);
  const double untrained_loss =
      untrained.evaluate(testing::equivalence_data(), {-1, {}, 0, nullptr}).at("loss");
  ASSERT_EQ(history.count("val_loss"), 1u) << all;
  ASSERT_EQ(history.at("val_loss").size(), 2u) << all;
  std::printf("untrained loss %.6f, after 30 asynchronous steps %.6f\n", untrained_loss,
              history.at("val_loss")[1]);
  EXPECT_LT(history.at("val_loss")[1], untrained_loss) << all;  // it learns

  const auto file = load_safetensors(dir.file("w.safetensors"));
  std::vector<torch::Tensor> trained;
  for (const auto& named : file.tensors) trained.push_back(named.second);
  ASSERT_EQ(trained.size(), initial.size());
  EXPECT_GT(testing::max_relative_difference(trained, initial), 1e-3);  // training moved them
}

// BackupAndRestore cannot save within an epoch here (steps run ahead of the results the chief
// has taken): the chief's fit refuses save_freq > 0 by name before any step or file, and its
// coordinator still shuts the other tasks down (they exit 0).
TEST(KerasFitUnderParameterServersTest, BackupAndRestoreRefusesSaveFreqWithinAnEpoch) {
  testing::TempDir dir;
  FitJob job(1, {"1", "5", dir.file("w.safetensors")}, {"DIST_TEST_BACKUP_SAVE_FREQ=3"});
  const auto results = job.processes.wait_all(60s);
  const std::string all = FitJob::describe(results);
  EXPECT_EQ(results[0].exit_code, 0) << all;  // ps
  EXPECT_EQ(results[1].exit_code, 0) << all;  // worker
  EXPECT_EQ(results[2].exit_code, 2) << all;  // chief
  EXPECT_NE(results[2].output.find("BackupAndRestore: save_freq 3 is not supported under "
                                   "ParameterServerStrategy"),
            std::string::npos)
      << all;
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.safetensors.backup"))) << all;
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.safetensors"))) << all;
}

// TF requires steps_per_epoch under ParameterServerStrategy; so does fit, on every task, before
// it serves or schedules anything (a worker here: no other process is needed to see it).
TEST(KerasFitUnderParameterServersTest, StepsPerEpochIsRequired) {
  LocalJob cluster({{"chief", 1}, {"worker", 1}, {"ps", 1}});
  ParameterServerOptions options;
  options.cluster = parse_tf_config(cluster.tf_config("worker", 0));
  ParameterServerStrategy strategy(options);
  Model model = testing::keras_tutorial_cnn();
  model.compile(strategy, optimizers::SGD(0.1), SparseCategoricalCrossentropy(true));
  FitOptions fit;
  fit.verbose = 0;
  const std::string message =
      testing::message_of<InvalidArgument>([&] { model.fit(testing::equivalence_data(), fit); });
  EXPECT_NE(message.find("under strategy 'parameter_server' ("), std::string::npos) << message;
  EXPECT_NE(message.find("steps_per_epoch is required (as in TensorFlow)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("e.g. to 20 (the dataset's batches)"), std::string::npos) << message;
}

}  // namespace
}  // namespace dist::keras
