// dist-train --loop fit: the main job through keras::Model::fit, against the custom loop, under
// several worker processes, and killed and resumed (BackupAndRestore). Real processes on
// 127.0.0.1, bounded in time.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/train/safetensors.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::expect_same_weights;
using testing::ProcessResult;
using testing::weights_in;
using testing::WorkerProcesses;

// 640 examples in global batches of 64: 10 steps per epoch.
std::vector<std::string> small_job(const std::string& loop, const std::string& weights,
                                   int epochs = 2) {
  return {"--loop",
          loop,
          "--replicas",
          "2",
          "--train-examples",
          "640",
          "--epochs",
          std::to_string(epochs),
          "--global-batch",
          "64",
          "--seed",
          "5",
          "--no-progress",
          "--save-weights",
          weights};
}

ProcessResult run(const std::vector<std::string>& args) {
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, args, {});
  return process.wait_all(240s).at(0);
}

nlohmann::json last_json(const std::string& output) {
  std::istringstream lines(output);
  std::string line, json;
  while (std::getline(lines, line))
    if (line.rfind("{", 0) == 0) json = line;
  EXPECT_FALSE(json.empty()) << "no JSON result line in:\n" << output;
  return json.empty() ? nlohmann::json::object({{"missing", true}}) : nlohmann::json::parse(json);
}

TEST(DistTrainFitTest, FitTakesTheCustomLoopsStepsBitForBit) {
  testing::TempDir dir;
  auto custom = run(small_job("custom", dir.file("custom.safetensors")));
  ASSERT_EQ(custom.exit_code, 0) << custom.output;
  auto fit = run(small_job("fit", dir.file("fit.safetensors")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  EXPECT_NE(fit.output.find("10/10 [==============================] - "), std::string::npos)
      << fit.output;
  EXPECT_NE(fit.output.find("Total params: 121,930"), std::string::npos) << fit.output;
  expect_same_weights(dir.file("custom.safetensors"), dir.file("fit.safetensors"));
  // The same test set evaluated by the same weights.
  EXPECT_EQ(last_json(custom.output)["test_accuracy"], last_json(fit.output)["test_accuracy"]);
  EXPECT_EQ(last_json(fit.output)["steps"], 20);
}

TEST(DistTrainFitTest, FitUnderTwoWorkerProcessesEqualsFitOnOneDevice) {
  testing::TempDir dir;
  auto one = small_job("fit", dir.file("one.safetensors"), 1);
  one[3] = "1";  // --replicas
  one.insert(one.begin(), {"--strategy", "one_device"});
  auto single = run(one);
  ASSERT_EQ(single.exit_code, 0) << single.output;

  // Two workers of one replica each, over Gloo on 127.0.0.1 (dist-launch writes TF_CONFIG).
  auto workers = small_job("fit", dir.file("workers.safetensors"), 1);
  workers[3] = "1";
  workers.insert(workers.begin(), {"--strategy", "multi_worker", "--collective-timeout", "60"});
  std::vector<std::string> launch{"--workers", "2", "--", DIST_TRAIN_BINARY};
  launch.insert(launch.end(), workers.begin(), workers.end());
  WorkerProcesses launcher;
  launcher.start(DIST_LAUNCH_BINARY, launch, {});
  auto result = launcher.wait_all(240s).at(0);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("[worker:0] Number of devices: 2"), std::string::npos)
      << result.output;
  EXPECT_LT(testing::max_relative_difference(weights_in(dir.file("workers.safetensors")),
                                             weights_in(dir.file("one.safetensors"))),
            1e-5);
}

std::string latest_name(const std::string& dir) {
  std::ifstream in(dir + "/checkpoint");
  if (!in) return "";
  try {
    return nlohmann::json::parse(in)["latest"].get<std::string>();
  } catch (const std::exception&) {
    return "";  // being replaced right now
  }
}

TEST(DistTrainFitTest, AKilledFitResumesAtTheInterruptedEpochAndStepBitForBit) {
  testing::TempDir dir;
  auto whole = run(small_job("fit", dir.file("whole.safetensors"), 3));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  // Saving every step; SIGKILL once a checkpoint of epoch 2 (steps 11-20) exists.
  auto job = small_job("fit", dir.file("resumed.safetensors"), 3);
  job.insert(job.end(), {"--checkpoint-dir", dir.file("backup"), "--checkpoint-every", "1"});
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, job, {});
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  auto step_of = [](const std::string& name) {
    return name.empty() ? -1 : std::stoi(name.substr(5, name.find('.') - 5));  // ckpt-<n>.
  };
  while (step_of(latest_name(dir.file("backup"))) < 12 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  process.kill(0, SIGKILL);
  auto killed = process.wait_all(30s).at(0);
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL) << killed.output;
  const int saved = step_of(latest_name(dir.file("backup")));
  ASSERT_GE(saved, 12);
  ASSERT_LT(saved, 30) << "finished before the kill";

  auto resumed = run(job);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(last_json(resumed.output)["resumed_at_step"], saved);
  EXPECT_EQ(last_json(resumed.output)["steps"], 30);
  expect_same_weights(dir.file("whole.safetensors"), dir.file("resumed.safetensors"));
  // The epochs after the resume report what the uninterrupted run reported.
  EXPECT_EQ(last_json(resumed.output)["train_loss"], last_json(whole.output)["train_loss"]);
  EXPECT_EQ(last_json(resumed.output)["test_accuracy"], last_json(whole.output)["test_accuracy"]);
}

TEST(DistTrainFitTest, SigtermStopsFitAfterTheStepSavesAndExits4) {
  testing::TempDir dir;
  auto job = small_job("fit", dir.file("w.safetensors"), 3);
  job[5] = "60000";  // --train-examples: long enough not to finish first
  job.insert(job.end(), {"--checkpoint-dir", dir.file("backup")});
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, job, {});
  ASSERT_TRUE(process.wait_for_output(0, "Epoch 1/3", 60s));
  std::this_thread::sleep_for(1500ms);
  process.kill(0, SIGTERM);
  auto result = process.wait_all(60s).at(0);
  ASSERT_EQ(result.exit_code, 4) << result.output;
  EXPECT_NE(result.output.find("Stopped by signal 15"), std::string::npos) << result.output;
  auto json = last_json(result.output);
  EXPECT_TRUE(json["interrupted"].get<bool>());
  EXPECT_EQ(latest_name(dir.file("backup")),
            "ckpt-" + std::to_string(json["steps"].get<int64_t>()) + ".safetensors");
}

}  // namespace
}  // namespace dist
