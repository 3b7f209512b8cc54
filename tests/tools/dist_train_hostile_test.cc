// dist-train used as a hostile new user would: workers started with different settings, a
// worker that fails after joining, outputs that cannot be written, resumes that do not fit,
// and flag values that mean nothing. Every case ends in a named error and a documented exit
// code before any work is lost. Real processes on 127.0.0.1, bounded in time.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "distribute/local_cluster.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::WorkerProcesses;

// 1024 examples in global batches of 128: 8 steps per epoch.
std::vector<std::string> job(std::vector<std::string> extra = {}) {
  std::vector<std::string> args{
      "--epochs", "1", "--train-examples",     "1024", "--global-batch", "128", "--no-progress",
      "--seed",   "3", "--collective-timeout", "60"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Two multi-worker dist-train processes, worker i with job(extra[i]).
std::vector<ProcessResult> two_workers(const std::vector<std::string>& extra0,
                                       const std::vector<std::string>& extra1,
                                       std::chrono::seconds bound = 120s) {
  const auto ports = free_loopback_ports(2);
  WorkerProcesses processes;
  const std::vector<std::string>* extras[] = {&extra0, &extra1};
  for (int i = 0; i < 2; ++i) {
    auto args = job(*extras[i]);
    args.insert(args.begin(), {"--strategy", "multi_worker"});
    processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, i)});
  }
  return processes.wait_all(bound);
}

ProcessResult one_process(const std::vector<std::string>& extra) {
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, job(extra), {});
  return process.wait_all(240s).at(0);
}

// job() with `flag` set to `value` instead of its usual value.
ProcessResult one_process_with(const std::string& flag, const std::string& value,
                               const std::vector<std::string>& extra) {
  auto args = job(extra);
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) args[i + 1] = value;
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, args, {});
  return process.wait_all(240s).at(0);
}

nlohmann::json last_json(const std::string& output) {
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty() && line[0] == '{') last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

TEST(HostileUserTest, WorkersWithDifferentMaxStepsFailTogetherNamingTheSetting) {
  auto results = two_workers({"--max-steps", "3"}, {"--max-steps", "5"});
  for (int w = 0; w < 2; ++w) {
    const auto& r = results[static_cast<size_t>(w)];
    SCOPED_TRACE("worker " + std::to_string(w) + ":\n" + r.output);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(testing::contains(r.output, "the workers disagree before step 1"));
    EXPECT_TRUE(testing::contains(r.output, "worker:1 (127.0.0.1:"));
    EXPECT_TRUE(testing::contains(r.output, "--max-steps = 5 where worker:0"));
    EXPECT_TRUE(testing::contains(r.output, "--max-steps = 3"));
    EXPECT_FALSE(testing::contains(r.output, "terminate called"));
    EXPECT_FALSE(testing::contains(r.output, "Epoch 1/1"));  // no step was taken
  }
}

TEST(HostileUserTest, WorkersWithDifferentLearningRatesFailInsteadOfTrainingGarbage) {
  auto results = two_workers({"--lr", "0.001"}, {"--lr", "0.5"});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(testing::contains(r.output, "--lr = 0.5 where worker:0")) << r.output;
  }
}

TEST(HostileUserTest, OnlyOneWorkerHoldingACheckpointIsNamedBeforeStepOne) {
  testing::TempDir dir;
  // worker:0 trains 2 steps into its own directory; then both start, each with its own.
  auto first = one_process({"--max-steps", "2", "--checkpoint-dir", dir.file("a")});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto results = two_workers({"--max-steps", "4", "--checkpoint-dir", dir.file("a")},
                             {"--max-steps", "4", "--checkpoint-dir", dir.file("b")});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(
        testing::contains(r.output, "the step resumed from = none (a fresh start) where worker:0"))
        << r.output;
    EXPECT_FALSE(testing::contains(r.output, "terminate called")) << r.output;
  }
}

TEST(HostileUserTest, AWorkerThatFailsAfterJoiningIsNamedAtOnceWithItsError) {
  const auto start = std::chrono::steady_clock::now();
  auto results = two_workers({"--rendezvous-timeout", "120"},
                             {"--rendezvous-timeout", "120", "--data-dir", "/nonexistent/fashion"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(results[1].exit_code, 3) << results[1].output;
  EXPECT_EQ(results[0].exit_code, 1) << results[0].output;
  EXPECT_TRUE(testing::contains(results[0].output, "worker:1 (127.0.0.1:")) << results[0].output;
  EXPECT_TRUE(
      testing::contains(results[0].output, "failed: MNIST-format directory /nonexistent/fashion"))
      << results[0].output;
  // Not the rendezvous timeout's hint ("is every worker started with the same TF_CONFIG ...").
  EXPECT_FALSE(testing::contains(results[0].output, "same TF_CONFIG")) << results[0].output;
  EXPECT_LT(seconds, 60) << "the chief waited for the rendezvous timeout";
}

TEST(HostileUserTest, AnUnwritableSaveWeightsPathIsRefusedBeforeTraining) {
  testing::TempDir dir;
  testing::write_file(dir.file("a_file"), "x");
  auto r = one_process(
      {"--strategy", "default", "--save-weights", dir.file("a_file") + "/weights.safetensors"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--save-weights")) << r.output;
  EXPECT_FALSE(testing::contains(r.output, "Epoch 1/1")) << r.output;

  // A missing parent directory is created, as for --checkpoint-dir and --log-dir.
  auto created = one_process({"--strategy", "default", "--max-steps", "1", "--save-weights",
                              dir.file("new/deeper/weights.safetensors")});
  EXPECT_EQ(created.exit_code, 0) << created.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("new/deeper/weights.safetensors")));
}

TEST(HostileUserTest, MeaninglessFlagValuesAreRefusedNamingTheFlag) {
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--replicas", "0"},
                                                        {"--threads", "0"},
                                                        {"--global-batch", "0"},
                                                        {"--train-examples", "0"},
                                                        {"--lr", "inf"},
                                                        {"--lr", "nan"},
                                                        {"--max-steps", "0"}}) {
    auto r = one_process({"--strategy", "default", flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ": " << r.output;
    EXPECT_TRUE(testing::contains(r.output, flag)) << r.output;
  }
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--rendezvous-timeout", "0.0001"}, {"--rendezvous-timeout", "inf"}}) {
    auto r = one_process({"--strategy", "multi_worker", flag, value});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(testing::contains(r.output, flag + " must be between 0.001 and 1e9 (seconds)"))
        << r.output;
  }
}

TEST(HostileUserTest, ResumingWithAnotherGlobalBatchOrSeedIsRefused) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(one_process({"--strategy", "default", "--max-steps", "2", "--checkpoint-dir", ckpt})
                .exit_code,
            0);
  auto batch = one_process_with("--global-batch", "256",
                                {"--strategy", "default", "--checkpoint-dir", ckpt});
  EXPECT_EQ(batch.exit_code, 2) << batch.output;
  EXPECT_TRUE(
      testing::contains(batch.output, "written with --global-batch 128 but this run has 256"))
      << batch.output;
  auto seed = one_process_with("--seed", "4", {"--strategy", "default", "--checkpoint-dir", ckpt});
  EXPECT_EQ(seed.exit_code, 2) << seed.output;
  EXPECT_TRUE(testing::contains(seed.output, "--seed 3 but this run has 4")) << seed.output;
}

TEST(HostileUserTest, AFinishedJobRunAgainSaysSoAndReportsRealTestAccuracy) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  auto first = one_process({"--strategy", "default", "--checkpoint-dir", ckpt});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto again = one_process({"--strategy", "default", "--checkpoint-dir", ckpt});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(testing::contains(again.output, "Nothing left to train")) << again.output;
  const auto json = last_json(again.output);
  ASSERT_FALSE(json.is_null()) << again.output;
  EXPECT_DOUBLE_EQ(json["test_accuracy"].get<double>(),
                   last_json(first.output)["test_accuracy"].get<double>());
}

TEST(HostileUserTest, ADamagedLatestCheckpointPointsToTheOlderOneAndResumeFromUsesIt) {
  testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(one_process({"--strategy", "default", "--max-steps", "4", "--checkpoint-every", "2",
                         "--checkpoint-dir", ckpt})
                .exit_code,
            0);
  const std::string latest = ckpt + "/ckpt-4.safetensors";
  std::string bytes = testing::read_file(latest);
  bytes[bytes.size() / 2] ^= 0x04;
  testing::write_file(latest, bytes);
  auto damaged = one_process({"--strategy", "default", "--checkpoint-dir", ckpt});
  EXPECT_EQ(damaged.exit_code, 3) << damaged.output;
  EXPECT_TRUE(testing::contains(damaged.output, "--resume-from " + ckpt + "/ckpt-2.safetensors"))
      << damaged.output;
  auto older = one_process({"--strategy", "default", "--max-steps", "3", "--checkpoint-dir", ckpt,
                            "--resume-from", ckpt + "/ckpt-2.safetensors"});
  EXPECT_EQ(older.exit_code, 0) << older.output;
  EXPECT_TRUE(
      testing::contains(older.output, "Resumed from " + ckpt + "/ckpt-2.safetensors at step 2"))
      << older.output;
}

}  // namespace
}  // namespace dist
