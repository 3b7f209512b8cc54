// dist-train used as a hostile new user would: workers started with different settings, a
// worker that fails after joining, outputs that cannot be written, resumes that do not fit,
// and flag values that mean nothing. Every case ends in a named error and a documented exit
// code before any work is lost. Real processes on 127.0.0.1, bounded in time.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/distribute/local_cluster.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"

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

// dist-train's checks of job(extra) in this process (testing::dist_train_checks): for the rows
// of a refusal table past the first of each kind, which runs as one_process.
ProcessResult checks_of(const std::vector<std::string>& extra) {
  return testing::dist_train_checks(job(extra));
}

// job() with `flag` set to `value` instead of its usual value.
std::vector<std::string> job_with(const std::string& flag, const std::string& value,
                                  const std::vector<std::string>& extra) {
  auto args = job(extra);
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) args[i + 1] = value;
  return args;
}

ProcessResult one_process_with(const std::string& flag, const std::string& value,
                               const std::vector<std::string>& extra) {
  WorkerProcesses process;
  process.start(DIST_TRAIN_BINARY, job_with(flag, value, extra), {});
  return process.wait_all(240s).at(0);
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

// Workers that would split or send their gradients differently (a sharding level, the packs a
// compression leaves alone) would pair unlike collectives: named before the first step instead.
TEST(HostileUserTest, WorkersWithDifferentShardingOrCompressionThresholdsFailNamingIt) {
  auto sharding = two_workers({"--sharding", "optimizer"}, {"--sharding", "gradients"});
  for (const auto& r : sharding) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(testing::contains(r.output, "--sharding = gradients where worker:0")) << r.output;
  }
  auto threshold = two_workers({"--gradient-compression", "bf16", "--compress-packs-from", "0"},
                               {"--gradient-compression", "bf16", "--compress-packs-from", "9"});
  for (const auto& r : threshold) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(testing::contains(r.output, "--compress-packs-from = 9 where worker:0"))
        << r.output;
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

// An output path that exists but is not a regular file (here FIFOs, and a device node of our own
// where mknod is permitted) is refused with exit 2 before training, and left as it was: the
// atomic rename would have replaced it, and appending to a FIFO would have blocked the run.
TEST(HostileUserTest, AnOutputThatIsNotARegularFileIsRefusedAndLeftAsItWas) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("ckpt"));
  std::filesystem::create_directories(dir.file("logs"));
  std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--save-weights", dir.file("fifo")}, dir.file("fifo")},
      {{"--checkpoint-dir", dir.file("ckpt")}, dir.file("ckpt/checkpoint")},
      {{"--log-dir", dir.file("logs")}, dir.file("logs/metrics.jsonl")}};
  for (const auto& [flags, target] : cases)
    ASSERT_EQ(::mkfifo(target.c_str(), 0600), 0) << target << ": " << std::strerror(errno);
  if (::mknod(dir.file("full").c_str(), S_IFCHR | 0600, ::makedev(1, 7)) == 0) {
    cases.push_back({{"--save-weights", dir.file("full")}, dir.file("full")});  // as /dev/full
  } else {
    std::cout << "[   NOTE   ] mknod not permitted here (" << std::strerror(errno)
              << "); the device case was not run\n";
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [flags, target] = cases[i];
    const auto start = std::chrono::steady_clock::now();
    auto flags_and_strategy = flags;
    flags_and_strategy.insert(flags_and_strategy.begin(), {"--strategy", "default"});
    // The first FIFO and the device as dist-train processes, the directories' FIFOs through its
    // checks in this process.
    const bool as_process = i == 0 || i == 3;
    auto r = as_process ? one_process(flags_and_strategy) : checks_of(flags_and_strategy);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << target;
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(testing::contains(r.output, "is not a regular file")) << r.output;
    EXPECT_TRUE(testing::contains(r.output, flags[0])) << r.output;
    EXPECT_FALSE(testing::contains(r.output, "Epoch 1/1")) << r.output;
    struct stat info {};
    ASSERT_EQ(::stat(target.c_str(), &info), 0) << target;
    EXPECT_FALSE(S_ISREG(info.st_mode)) << target << " was replaced by a regular file";
  }
}

// The job token file is read without blocking and only as far as a token can go: a FIFO with no
// writer and an endless file end in exit 2 at once, and are left as they were.
TEST(HostileUserTest, ATokenFileThatIsAFifoOrEndlessIsRefusedAtOnce) {
  testing::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0) << std::strerror(errno);
  testing::write_file(dir.file("endless"), std::string(1 << 20, 'a'));
  const auto ports = free_loopback_ports(1);
  for (const auto& [file, words] : std::vector<std::pair<std::string, std::string>>{
           {dir.file("fifo"), "not a regular file"},
           {dir.file("endless"), "longer than 1024 characters"}}) {
    const auto start = std::chrono::steady_clock::now();
    WorkerProcesses process;
    auto args = job();
    args.insert(args.begin(), {"--strategy", "multi_worker"});
    process.start(DIST_TRAIN_BINARY, args,
                  {"TF_CONFIG=" + local_tf_config(ports, 0), "DIST_JOB_TOKEN_FILE=" + file});
    auto r = process.wait_all(30s).at(0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << file;
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(testing::contains(r.output, "DIST_JOB_TOKEN_FILE")) << r.output;
    EXPECT_TRUE(testing::contains(r.output, words)) << r.output;
  }
  struct stat info {};
  ASSERT_EQ(::stat(dir.file("fifo").c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode));
}

// A checkpoint directory belongs to one job at a time: a second job on it is refused with exit 2
// before training, naming the first one's pid; a job killed with SIGKILL leaves no stale lock,
// so the next run on the directory trains (and resumes from what the killed one saved).
TEST(HostileUserTest, ASecondJobOnACheckpointDirectoryIsRefusedNamingTheFirst) {
  testing::TempDir dir;
  // The whole training set (469 steps an epoch), so the first job is still training when the
  // second starts; a checkpoint every 2 steps.
  const std::vector<std::string> args{"--strategy",
                                      "default",
                                      "--epochs",
                                      "1",
                                      "--global-batch",
                                      "128",
                                      "--no-progress",
                                      "--seed",
                                      "3",
                                      "--checkpoint-dir",
                                      dir.file("ckpt"),
                                      "--checkpoint-every",
                                      "2"};
  WorkerProcesses first;
  first.start(DIST_TRAIN_BINARY, args, {});
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (!std::filesystem::exists(dir.file("ckpt/checkpoint")) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(std::filesystem::exists(dir.file("ckpt/checkpoint"))) << "no checkpoint in 120 s";

  WorkerProcesses second;
  const auto start = std::chrono::steady_clock::now();
  second.start(DIST_TRAIN_BINARY, args, {});
  auto refused = second.wait_all(30s).at(0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(testing::contains(refused.output, "is in use by another job")) << refused.output;
  EXPECT_TRUE(testing::contains(refused.output, "pid " + std::to_string(first.pid(0))))
      << refused.output;
  EXPECT_FALSE(testing::contains(refused.output, "Epoch 1/1")) << refused.output;

  first.kill(0, SIGKILL);
  first.wait_all(30s);
  // --max-steps 1: the run resumes past it, so it only evaluates; what matters is that the lock
  // of the killed job did not stay behind.
  auto resume = args;
  resume.insert(resume.end(), {"--max-steps", "1"});
  WorkerProcesses third;
  third.start(DIST_TRAIN_BINARY, resume, {});
  auto after = third.wait_all(120s).at(0);
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_TRUE(testing::contains(after.output, "Resumed from")) << after.output;
}

// As processes: the first (refused as the flags are parsed), the global batch (as the data are
// opened) and the first timeout (as the strategy is made); the others through dist-train's
// checks in this process.
TEST(HostileUserTest, MeaninglessFlagValuesAreRefusedNamingTheFlag) {
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--replicas", "0"},
                                                        {"--threads", "0"},
                                                        {"--global-batch", "0"},
                                                        {"--train-examples", "0"},
                                                        {"--lr", "inf"},
                                                        {"--lr", "nan"},
                                                        {"--max-steps", "0"},
                                                        // more than job()'s 1024 examples
                                                        {"--global-batch", "1000000000"}}) {
    const bool as_process = (flag == "--replicas" || value == "1000000000");
    auto r = as_process ? one_process({"--strategy", "default", flag, value})
                        : checks_of({"--strategy", "default", flag, value});
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ": " << r.output;
    EXPECT_TRUE(testing::contains(r.output, flag)) << r.output;
  }
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--rendezvous-timeout", "0.0001"}, {"--rendezvous-timeout", "inf"}}) {
    auto r = value == "0.0001" ? one_process({"--strategy", "multi_worker", flag, value})
                               : checks_of({"--strategy", "multi_worker", flag, value});
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
  // The same refusal of a resume: through dist-train's checks in this process.
  auto seed = testing::dist_train_checks(
      job_with("--seed", "4", {"--strategy", "default", "--checkpoint-dir", ckpt}));
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
  const auto json = testing::last_json(again.output);
  ASSERT_FALSE(json.is_null()) << again.output;
  EXPECT_DOUBLE_EQ(json["test_accuracy"].get<double>(),
                   testing::last_json(first.output)["test_accuracy"].get<double>());
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
