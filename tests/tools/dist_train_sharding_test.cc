// dist-train --sharding as a user meets it: worker processes on 127.0.0.1 (dist-launch) whose
// sharded steps equal the unsharded ones, a sharded job resumed under another worker count, fit
// and bf16 under sharding, the bytes each worker sends, and the refusals. Real processes,
// bounded in time.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::WorkerProcesses;

// `workers` workers (small_multi_worker_job) at `sharding`, then `more`.
std::vector<std::string> job(int workers, const std::string& sharding,
                             std::vector<std::string> more) {
  more.insert(more.begin(), {"--sharding", sharding});
  return testing::small_multi_worker_job(workers, std::move(more));
}

using testing::launch_job;
using testing::run_dist_train_alone;

double difference(const std::string& a, const std::string& b) {
  const double d = testing::max_relative_difference(testing::weights_in(a), testing::weights_in(b));
  std::printf("max relative difference %.3g\n", d);
  return d;
}

// Adam, 14 steps: unsharded on 2 workers; sharded (optimizer) on 2 workers stopped at step 6
// and resumed from its checkpoint by 4 workers sharding parameters, whose checkpoints are in
// pieces (the oldest deleted with theirs); its checkpoint of step 12 resumed by 2 unsharded
// workers. The ends agree within the tolerance of summing in another order (1e-5; measured
// 3e-8); that the checkpoint holds the slots themselves is
// StrategyConformanceTest.TwentySgdAndTwentyAdamStepsEqualOneDeviceAndItsCheckpointToo.
TEST(DistTrainShardingTest, AShardedJobResumesUnderAnotherWorkerCountWhereAnUnshardedJobEnds) {
  testing::TempDir dir;
  auto plain = launch_job(
      job(2, "none",
          {"--max-steps", "14", "--epochs", "2", "--save-weights", dir.file("plain.safetensors")}));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const std::vector<std::string> saving{
      "--epochs", "2", "--checkpoint-dir", dir.file("ckpt"), "--checkpoint-every", "3"};
  auto first_args = saving;
  first_args.insert(first_args.end(), {"--max-steps", "6"});
  auto first = launch_job(job(2, "optimizer", first_args));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto rest_args = saving;
  rest_args.insert(rest_args.end(), {"--max-steps", "14", "--max-to-keep", "2", "--save-weights",
                                     dir.file("resumed.safetensors")});
  auto resumed = launch_job(job(4, "parameters", rest_args));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 6 (epoch 1, batch 6)"), std::string::npos)
      << resumed.output;
  EXPECT_LT(difference(dir.file("plain.safetensors"), dir.file("resumed.safetensors")), 1e-5);
  std::vector<std::string> kept{".dist-lock", "checkpoint"};
  for (const std::string step : {"12", "14"}) {
    kept.push_back("ckpt-" + step + ".safetensors");
    for (int w = 0; w < 4; ++w)
      kept.push_back("ckpt-" + step + ".safetensors.piece-" + std::to_string(w) + "-of-4");
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(testing::files_in(dir.file("ckpt")), kept);
  auto last = launch_job(testing::small_multi_worker_job(
      2, {"--epochs", "2", "--max-steps", "14", "--resume-from",
          dir.file("ckpt/ckpt-12.safetensors"), "--save-weights", dir.file("last.safetensors")}));
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_NE(last.output.find("at step 12"), std::string::npos) << last.output;
  EXPECT_LT(difference(dir.file("plain.safetensors"), dir.file("last.safetensors")), 1e-5);
}

// fit under sharding takes the custom loop's steps bit for bit (stage 3 gathers the Keras
// model's layers as it gathers the Sequential's children), and resumes from its pieces; bf16 mixed
// precision trains sharded (stages 2 and 3) where it trains unsharded.
TEST(DistTrainShardingTest, FitAndMixedPrecisionTrainShardedAsUnsharded) {
  testing::TempDir dir;
  for (const std::string sharding : {"gradients", "parameters"}) {
    for (const std::string loop : {"custom", "fit"}) {
      auto result = launch_job(job(
          2, sharding,
          {"--loop", loop, "--epochs", "1", "--save-weights", dir.file(loop + "_" + sharding)}));
      ASSERT_EQ(result.exit_code, 0) << result.output;
    }
    testing::expect_same_weights(dir.file("custom_" + sharding), dir.file("fit_" + sharding));
  }
  // fit at stage 3 stopped at step 6 (BackupAndRestore writes pieces) and resumed.
  const std::vector<std::string> backed_up{"--loop",           "fit",           "--epochs", "1",
                                           "--checkpoint-dir", dir.file("ckpt")};
  auto stopped = backed_up;
  stopped.insert(stopped.end(), {"--max-steps", "6"});
  auto first = launch_job(job(2, "parameters", stopped));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("ckpt/ckpt-6.safetensors.piece-1-of-2")))
      << first.output;
  auto resuming = backed_up;
  resuming.insert(resuming.end(), {"--save-weights", dir.file("fit_resumed")});
  auto resumed = launch_job(job(2, "parameters", resuming));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 6"), std::string::npos) << resumed.output;
  testing::expect_same_weights(dir.file("fit_parameters"), dir.file("fit_resumed"));
  for (const std::string sharding : {"none", "gradients", "parameters"}) {
    auto result = launch_job(job(2, sharding,
                                 {"--mixed-precision", "bf16", "--epochs", "1", "--save-weights",
                                  dir.file("bf16_" + sharding)}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  EXPECT_LT(difference(dir.file("bf16_none"), dir.file("bf16_gradients")), 1e-5);
  EXPECT_LT(difference(dir.file("bf16_none"), dir.file("bf16_parameters")), 1e-5);
}

// The 20M-parameter MLP (784-4096-4096-10): a reduce-scatter and an all-gather move what one
// all-reduce moves. Stage 3 by default keeps a model of at most 256 MiB of parameters whole from
// its forward to its backward (kDefaultShardingReuseBytes): this one's 80 MB are gathered once,
// the bytes of an all-reduce. --sharding-reuse-bytes 0 gathers each layer for its backward too,
// 1.5x (ZeRO's figure; the last layer, kept from its forward for its backward, is 0.2% of the
// model); 1 MiB keeps the 4096x4096 layer (only the last layer computes after it), 1.08x. The
// weights are the same at every setting.
TEST(DistTrainShardingTest, ShardedStepsSendTheBytesOfOneAllReduce) {
  testing::TempDir dir;
  std::map<std::string, int64_t> bytes;
  const auto run = [&](const std::string& name, const std::string& sharding,
                       const std::string& reuse_bytes) {
    std::vector<std::string> args{"--model",        "mlp",         "--max-steps",     "3",
                                  "--epochs",       "1",           "--test-examples", "64",
                                  "--save-weights", dir.file(name)};
    if (!reuse_bytes.empty()) args.insert(args.end(), {"--sharding-reuse-bytes", reuse_bytes});
    auto result = launch_job(job(2, sharding, args));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    bytes[name] = testing::bytes_sent_per_step(result);
    EXPECT_NE(result.output.find("\"peak_rss_bytes\":"), std::string::npos) << result.output;
  };
  for (const std::string sharding : {"none", "optimizer", "gradients", "parameters"})
    run(sharding, sharding, "");
  run("parameters_reuse_0", "parameters", "0");
  run("parameters_reuse_1MiB", "parameters", "1048576");
  EXPECT_GT(bytes["none"], 80'000'000);
  const auto expect_ratio = [&](const std::string& name, double low, double high) {
    const double r = static_cast<double>(bytes[name]) / bytes["none"];
    std::printf("%s sends %.4f x the bytes of an all-reduce\n", name.c_str(), r);
    EXPECT_GT(r, low) << name;
    EXPECT_LT(r, high) << name;
  };
  for (const std::string sharded : {"optimizer", "gradients", "parameters"})
    expect_ratio(sharded, 0.95, 1.05);
  expect_ratio("parameters_reuse_1MiB", 1.05, 1.12);
  expect_ratio("parameters_reuse_0", 1.45, 1.6);
  testing::expect_same_weights(dir.file("parameters"), dir.file("parameters_reuse_0"));
  testing::expect_same_weights(dir.file("parameters"), dir.file("parameters_reuse_1MiB"));
}

// The flags are refused as they are parsed: the first as a dist-train process, the others through
// dist-train's checks in this process (testing::dist_train_checks).
TEST(DistTrainShardingTest, WhatCannotBeShardedIsRefusedWithTheReason) {
  auto stage3 =
      run_dist_train_alone({"--sharding", "parameters", "--replicas", "2", "--epochs", "1"});
  EXPECT_EQ(stage3.exit_code, 2) << stage3.output;
  EXPECT_NE(stage3.output.find("one replica"), std::string::npos) << stage3.output;
  auto both =
      testing::dist_train_checks({"--sharding", "optimizer", "--gradient-compression", "bf16"});
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("use one of them"), std::string::npos) << both.output;
  auto one = testing::dist_train_checks({"--strategy", "one_device", "--sharding", "gradients"});
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_NE(one.output.find("one replica"), std::string::npos) << one.output;
  auto unknown = testing::dist_train_checks({"--sharding", "zero3"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("'zero3'"), std::string::npos) << unknown.output;
  auto reuse =
      testing::dist_train_checks({"--sharding", "gradients", "--sharding-reuse-bytes", "-1"});
  EXPECT_EQ(reuse.exit_code, 2) << reuse.output;
  EXPECT_NE(reuse.output.find("use --sharding parameters"), std::string::npos) << reuse.output;
}

// Minutes (label "long"): the 113M-parameter MLP with Adam on 4 workers of this host, each
// process limited to 3.6 GB of address space (RLIMIT_AS, inherited from dist-launch). Measured
// here: unsharded workers reach 3.97 GB (VmPeak), sharded (gradients) 3.20 GB. Unsharded, every
// worker fails saying it ran out of memory and naming --sharding; at stage 3 (parameters) the
// job trains, writes its checkpoint in pieces, and a second job resumes from it under the same
// limit: each worker reads only its ranges (the whole state, 1.36 GB of parameters and Adam
// slots, held for a moment by every worker, would not fit beside the rest).
TEST(LongShardingMemoryTest, AModelWhoseAdamStateExceedsTheLimitTrainsAndResumesOnlySharded) {
  testing::TempDir dir;
  auto limited = [&](const std::string& sharding, const std::string& max_steps) {
    WorkerProcesses process;
    process.start("/usr/bin/prlimit",
                  {"--as=3600000000",
                   DIST_LAUNCH_BINARY,
                   "--workers",
                   "4",
                   "--",
                   DIST_TRAIN_BINARY,
                   "--strategy",
                   "multi_worker",
                   "--model",
                   "mlp_wide",
                   "--threads",
                   "1",
                   "--global-batch",
                   "16",
                   "--train-examples",
                   "64",
                   "--epochs",
                   "1",
                   "--max-steps",
                   max_steps,
                   "--test-examples",
                   "16",
                   "--no-progress",
                   "--sharding",
                   sharding,
                   "--checkpoint-dir",
                   dir.file("ckpt-" + sharding),
                   "--checkpoint-every",
                   "2"},
                  // Pages freed by stage 3 go back to the system at once (sharding.md).
                  {"TCMALLOC_AGGRESSIVE_DECOMMIT=true"});
    return process.wait_all(900s).at(0);
  };
  auto unsharded = limited("none", "2");
  EXPECT_NE(unsharded.exit_code, 0) << unsharded.output;
  EXPECT_NE(unsharded.output.find("dist-train: out of memory"), std::string::npos)
      << unsharded.output;
  EXPECT_NE(unsharded.output.find("--sharding optimizer or gradients"), std::string::npos)
      << unsharded.output;
  auto sharded = limited("parameters", "2");
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  const auto files = testing::files_in(dir.file("ckpt-parameters"));
  EXPECT_EQ(std::count(files.begin(), files.end(), "ckpt-2.safetensors.piece-3-of-4"), 1);
  auto resumed = limited("parameters", "4");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 2 (epoch 1, batch 2)"), std::string::npos)
      << resumed.output;
}

}  // namespace
}  // namespace dist
