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
#include "run_program.h"
#include "test_util.h"
#include "tools/train_runs.h"
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

std::vector<std::string> with(std::vector<std::string> args, const std::string& last) {
  args.push_back(last);
  return args;
}

// dist-train with `args`, for 4 minutes at most.
ProcessResult run_job(const std::vector<std::string>& args) {
  return testing::run_program(DIST_TRAIN_BINARY, args, 240s);
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
  auto custom = run_job(small_job("custom", dir.file("custom.safetensors")));
  ASSERT_EQ(custom.exit_code, 0) << custom.output;
  auto fit = run_job(small_job("fit", dir.file("fit.safetensors")));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  EXPECT_NE(fit.output.find("10/10 [==============================] - "), std::string::npos)
      << fit.output;
  EXPECT_NE(fit.output.find("Total params: 121,930"), std::string::npos) << fit.output;
  expect_same_weights(dir.file("custom.safetensors"), dir.file("fit.safetensors"));
  // The same test set evaluated by the same weights.
  EXPECT_EQ(last_json(custom.output)["test_accuracy"], last_json(fit.output)["test_accuracy"]);
  EXPECT_EQ(last_json(fit.output)["steps"], 20);
}

// --mixed-precision bf16: both loops compute in bfloat16 the same way (the same ops under
// autocast, float32 outputs), so they still agree bit for bit; and bfloat16 really ran: the
// weights differ from float32's.
TEST(DistTrainFitTest, Bf16FitTakesTheCustomLoopsStepsBitForBit) {
  testing::TempDir dir;
  auto bf16 = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--mixed-precision", "bf16"});
    return args;
  };
  auto custom = run_job(bf16(small_job("custom", dir.file("custom.safetensors"), 1)));
  ASSERT_EQ(custom.exit_code, 0) << custom.output;
  auto fit = run_job(bf16(small_job("fit", dir.file("fit.safetensors"), 1)));
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  expect_same_weights(dir.file("custom.safetensors"), dir.file("fit.safetensors"));
  EXPECT_EQ(last_json(custom.output)["mixed_precision"], "mixed_bfloat16");
  EXPECT_EQ(last_json(fit.output)["mixed_precision"], "mixed_bfloat16");
  EXPECT_EQ(last_json(custom.output)["test_accuracy"], last_json(fit.output)["test_accuracy"]);

  auto float32 = run_job(small_job("custom", dir.file("float32.safetensors"), 1));
  ASSERT_EQ(float32.exit_code, 0) << float32.output;
  EXPECT_EQ(last_json(float32.output)["mixed_precision"], "float32");
  auto a = testing::weights_in(dir.file("float32.safetensors"));
  auto b = testing::weights_in(dir.file("custom.safetensors"));
  ASSERT_EQ(a.size(), b.size());
  bool any_differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].scalar_type(), torch::kFloat) << "variables stay float32";
    any_differs = any_differs || !torch::equal(a[i], b[i]);
    // Ten steps of Adam at 1e-3 from the same start: bfloat16's rounding moves weights by
    // a fraction of a step, not more.
    EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 0.02) << "tensor " << i;
  }
  EXPECT_TRUE(any_differs) << "bf16 weights equal float32's: autocast did not run";
}

TEST(DistTrainFitTest, Fp16IsRefusedOnThisCpuBuildWithTheAlternative) {
  testing::TempDir dir;
  auto args = small_job("custom", dir.file("w.safetensors"), 1);
  args.insert(args.end(), {"--mixed-precision", "fp16"});
  auto result = run_job(args);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("mixed_float16 needs a GPU"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("mixed_bfloat16 (bf16)"), std::string::npos) << result.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("w.safetensors")));

  // A policy that does not exist, refused as the flags are parsed: through dist-train's checks
  // in this process (testing::dist_train_checks).
  args.back() = "bf61";
  result = testing::dist_train_checks(args);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("unknown mixed precision policy 'bf61'"), std::string::npos)
      << result.output;
}

TEST(DistTrainFitTest, FitUnderTwoWorkerProcessesEqualsFitOnOneDevice) {
  testing::TempDir dir;
  auto one = small_job("fit", dir.file("one.safetensors"), 1);
  one[3] = "1";  // --replicas
  one.insert(one.begin(), {"--strategy", "one_device"});
  auto single = run_job(one);
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
  // Adam's tolerance of the in-process equivalence (mirrored_strategy_test.cc): the batch of 32
  // per worker sums the convolutions' weight gradients in another order than the batch of 64
  // (oneDNN blocks channels-last by batch), and Adam divides by each gradient's own scale.
  EXPECT_LT(testing::max_relative_difference(weights_in(dir.file("workers.safetensors")),
                                             weights_in(dir.file("one.safetensors"))),
            1e-4);
}

std::string latest_name_or_empty(const std::string& dir) {
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
  auto whole = run_job(small_job("fit", dir.file("whole.safetensors"), 3));
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
  while (step_of(latest_name_or_empty(dir.file("backup"))) < 12 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  process.kill(0, SIGKILL);
  auto killed = process.wait_all(30s).at(0);
  ASSERT_EQ(killed.exit_code, 128 + SIGKILL) << killed.output;
  const int saved = step_of(latest_name_or_empty(dir.file("backup")));
  ASSERT_GE(saved, 12);
  ASSERT_LT(saved, 30) << "finished before the kill";

  auto resumed = run_job(job);
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
  EXPECT_EQ(latest_name_or_empty(dir.file("backup")),
            "ckpt-" + std::to_string(json["steps"].get<int64_t>()) + ".safetensors");
}

// A fit resumed within its last epoch that stops before the epoch ends completes no epoch: the
// JSON then says the epochs done before and the training figures of the epoch so far, which
// are the custom loop's at the same step (it reports a partial epoch so), not zeros.
TEST(DistTrainFitTest, AFitResumedWithinItsLastEpochReportsTheEpochSoFar) {
  testing::TempDir dir;
  auto job = small_job("fit", dir.file("fit.safetensors"), 3);
  job.insert(job.end(), {"--checkpoint-dir", dir.file("backup"), "--max-steps"});
  ASSERT_EQ(run_job(with(job, "22")).exit_code, 0);  // stops in epoch 3 (steps 21-30), saved
  const auto resumed = run_job(with(job, "26"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto fit = last_json(resumed.output);
  EXPECT_EQ(fit["resumed_at_step"], 22) << resumed.output;
  EXPECT_EQ(fit["steps"], 26);
  EXPECT_EQ(fit["epochs"], 2);
  auto custom_job = small_job("custom", dir.file("custom.safetensors"), 3);
  custom_job.insert(custom_job.end(), {"--max-steps", "26"});
  const auto custom_run = run_job(custom_job);
  ASSERT_EQ(custom_run.exit_code, 0) << custom_run.output;
  const auto custom = last_json(custom_run.output);
  EXPECT_GT(fit["train_loss"].get<double>(), 0.0);
  EXPECT_NEAR(fit["train_loss"].get<double>(), custom["train_loss"].get<double>(), 1e-6);
  EXPECT_NEAR(fit["train_accuracy"].get<double>(), custom["train_accuracy"].get<double>(), 1e-9);
  expect_same_weights(dir.file("fit.safetensors"), dir.file("custom.safetensors"));
}

}  // namespace
}  // namespace dist
