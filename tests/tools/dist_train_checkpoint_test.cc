// dist-train's checkpoints as a user meets them: resuming bit for bit, a process killed at
// each stage of a save, a damaged checkpoint, and SIGTERM. Real processes, bounded in time.
// The kills come from crashing_train (crashing_train_main.cc): the same training job with an
// Env that raises SIGKILL at the chosen stage of a save.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/distribute/local_cluster.h"
#include "dist/train/safetensors.h"
#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::expect_same_weights;
using testing::ProcessResult;
using testing::WorkerProcesses;

// 640 examples in global batches of 64: 10 steps per epoch.
std::vector<std::string> small_job(const std::string& checkpoint_dir, int64_t max_steps) {
  std::vector<std::string> args{"--replicas",
                                "2",
                                "--train-examples",
                                "640",
                                "--global-batch",
                                "64",
                                "--epochs",
                                "3",
                                "--seed",
                                "5",
                                "--no-progress",
                                "--max-steps",
                                std::to_string(max_steps)};
  if (!checkpoint_dir.empty()) {
    args.insert(args.end(), {"--checkpoint-dir", checkpoint_dir, "--checkpoint-every", "4"});
  }
  return args;
}

// dist-train (or `binary`) with `args`, for 4 minutes at most.
ProcessResult run_train(const std::vector<std::string>& args,
                        const std::string& binary = DIST_TRAIN_BINARY) {
  return testing::run_program(binary, args, 240s);
}

std::string latest_name(const std::string& dir) {
  std::ifstream in(dir + "/checkpoint");
  return nlohmann::json::parse(in)["latest"].get<std::string>();
}

TEST(DistTrainCheckpointTest, AResumedRunEndsWithTheSameWeightsBitForBit) {
  testing::TempDir dir;
  auto whole = small_job("", 14);
  whole.insert(whole.end(), {"--save-weights", dir.file("whole.safetensors")});
  auto uninterrupted = run_train(whole);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;

  // Stopped at step 6 (mid-epoch, between periodic saves), then resumed to step 14 (across
  // an epoch end and its evaluation).
  auto first = run_train(small_job(dir.file("ckpt"), 6));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(latest_name(dir.file("ckpt")), "ckpt-6.safetensors");
  auto rest = small_job(dir.file("ckpt"), 14);
  rest.insert(rest.end(), {"--save-weights", dir.file("resumed.safetensors")});
  auto resumed = run_train(rest);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 6 (epoch 1, batch 6)"), std::string::npos)
      << resumed.output;

  expect_same_weights(dir.file("whole.safetensors"), dir.file("resumed.safetensors"));
}

class CrashWhileSavingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CrashWhileSavingTest, TheLatestPointerStillResolvesAndTheNextSaveCleansUp) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  auto whole = small_job("", 4);
  whole.insert(whole.end(), {"--save-weights", dir.file("whole.safetensors")});
  ASSERT_EQ(run_train(whole).exit_code, 0);
  ASSERT_EQ(run_train(small_job(ckpt, 2)).exit_code, 0);
  ASSERT_EQ(latest_name(ckpt), "ckpt-2.safetensors");

  auto crash_at = small_job(ckpt, 4);
  crash_at.insert(crash_at.end(), {"--crash-at", GetParam()});
  auto crashed = run_train(crash_at, CRASHING_TRAIN_BINARY);
  ASSERT_EQ(crashed.exit_code, 128 + SIGKILL) << crashed.output;
  EXPECT_NE(crashed.output.find("at step 2"), std::string::npos) << crashed.output;
  EXPECT_EQ(latest_name(ckpt), "ckpt-2.safetensors");
  EXPECT_NO_THROW(load_safetensors(ckpt + "/ckpt-2.safetensors"));

  auto resume = small_job(ckpt, 4);
  resume.insert(resume.end(), {"--save-weights", dir.file("resumed.safetensors")});
  auto again = run_train(resume);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("at step 2"), std::string::npos) << again.output;
  EXPECT_EQ(latest_name(ckpt), "ckpt-4.safetensors");
  for (const auto& entry : std::filesystem::directory_iterator(ckpt))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  expect_same_weights(dir.file("whole.safetensors"), dir.file("resumed.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(DistTrainCheckpoint, CrashWhileSavingTest,
                         ::testing::Values("after_data", "before_rename", "before_pointer"),
                         [](const auto& info) { return info.param; });

TEST(DistTrainCheckpointTest, ADamagedCheckpointIsANamedErrorAndExitCode3) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_train(small_job(ckpt, 2)).exit_code, 0);
  const std::string latest = ckpt + "/" + latest_name(ckpt);
  std::string bytes = testing::read_file(latest);
  bytes[bytes.size() / 2] ^= 0x04;
  testing::write_file(latest, bytes);
  auto damaged = run_train(small_job(ckpt, 4));
  EXPECT_EQ(damaged.exit_code, 3) << damaged.output;
  EXPECT_NE(damaged.output.find(latest), std::string::npos) << damaged.output;
  EXPECT_NE(damaged.output.find("checksum"), std::string::npos) << damaged.output;
}

TEST(DistTrainCheckpointTest, SigtermFinishesTheStepSavesAndExits4) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  auto args = small_job(ckpt, 2000);
  args[3] = "60000";  // --train-examples: long enough not to finish first
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, args, {});
  ASSERT_TRUE(process.wait_for_output(0, "Epoch 1/3", 60s));
  std::this_thread::sleep_for(1500ms);
  process.kill(0, SIGTERM);
  auto result = process.wait_all(60s).at(0);
  ASSERT_EQ(result.exit_code, 4) << result.output;
  EXPECT_NE(result.output.find("Stopped by signal 15"), std::string::npos) << result.output;
  std::istringstream lines(result.output);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  auto json = nlohmann::json::parse(last);
  EXPECT_TRUE(json["interrupted"].get<bool>());
  const int64_t steps = json["steps"].get<int64_t>();
  EXPECT_GT(steps, 0);
  EXPECT_EQ(latest_name(ckpt), "ckpt-" + std::to_string(steps) + ".safetensors");
}

// Only worker:1 gets the signal; both stop after the same step (they agree every step), the
// chief saves that step, and both exit 4.
TEST(DistTrainCheckpointTest, SigtermToOneWorkerStopsAllWorkersAtTheSameStep) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  auto args = small_job(ckpt, 2000);
  args[1] = "1";      // --replicas: per worker
  args[3] = "60000";  // --train-examples
  args.insert(args.begin(), {"--strategy", "multi_worker", "--collective-timeout", "60"});
  auto ports = free_loopback_ports(2);
  WorkerProcesses processes;
  for (int i = 0; i < 2; ++i)
    processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, i)});
  ASSERT_TRUE(processes.wait_for_output(0, "Epoch 1/3", 60s));
  std::this_thread::sleep_for(1500ms);
  processes.kill(1, SIGTERM);
  auto results = processes.wait_all(60s);
  ASSERT_EQ(results[0].exit_code, 4) << results[0].output << results[1].output;
  ASSERT_EQ(results[1].exit_code, 4) << results[1].output;
  std::istringstream lines(results[0].output);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  const int64_t steps = nlohmann::json::parse(last)["steps"].get<int64_t>();
  EXPECT_EQ(latest_name(ckpt), "ckpt-" + std::to_string(steps) + ".safetensors");
}

}  // namespace
}  // namespace dist
