// dist-train --gradient-compression as a user meets it: two worker processes on 127.0.0.1
// (dist-launch), PowerSGD resumed from a checkpoint bit for bit, fit taking the custom loop's
// compressed steps, the bytes each worker sends by the library's count, and the strategies that
// refuse a compression. Real processes, bounded in time.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::expect_same_weights;
using testing::ProcessResult;
using testing::WorkerProcesses;

// Two workers (small_multi_worker_job) at `compression`, then `more`.
std::vector<std::string> compressed_workers(const std::string& compression,
                                            std::vector<std::string> more) {
  // Every pack compressed: the tutorial CNN's one pack is below the default threshold.
  more.insert(more.begin(), {"--gradient-compression", compression, "--compress-packs-from", "0"});
  return testing::small_multi_worker_job(2, std::move(more));
}

using testing::launch_job;
using testing::run_dist_train_alone;

int64_t bytes_per_step(const ProcessResult& result) { return testing::bytes_sent_per_step(result); }

TEST(DistTrainCompressionTest, APowerSgdJobResumedFromItsCheckpointEqualsAnUninterruptedOne) {
  testing::TempDir dir;
  // Rank 2 from step 3 on: steps 4-14 are compressed, with error feedback the resume must keep.
  auto whole = launch_job(compressed_workers(
      "powersgd:2:3", {"--max-steps", "14", "--save-weights", dir.file("whole.safetensors")}));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::vector<std::string> saving{
      "--epochs", "3", "--checkpoint-dir", dir.file("ckpt"), "--checkpoint-every", "4"};
  auto first_args = saving;
  first_args.insert(first_args.end(), {"--max-steps", "6"});
  auto first = launch_job(compressed_workers("powersgd:2:3", first_args));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto rest_args = saving;
  rest_args.insert(rest_args.end(),
                   {"--max-steps", "14", "--save-weights", dir.file("resumed.safetensors")});
  auto resumed = launch_job(compressed_workers("powersgd:2:3", rest_args));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 6 (epoch 1, batch 6)"), std::string::npos)
      << resumed.output;
  expect_same_weights(dir.file("whole.safetensors"), dir.file("resumed.safetensors"));

  // A job resumed with another compression is refused, naming both.
  auto other = saving;
  other.insert(other.end(), {"--max-steps", "20"});
  auto mismatch = launch_job(compressed_workers("powersgd:3:3", other));
  EXPECT_NE(mismatch.exit_code, 0);
  EXPECT_NE(mismatch.output.find("'powersgd:2'"), std::string::npos) << mismatch.output;
  EXPECT_NE(mismatch.output.find("'powersgd:3'"), std::string::npos) << mismatch.output;
}

TEST(DistTrainCompressionTest, FitTakesTheCustomLoopsCompressedStepsBitForBit) {
  testing::TempDir dir;
  for (const std::string loop : {"custom", "fit"}) {
    auto result = launch_job(compressed_workers(
        "bf16", {"--loop", loop, "--epochs", "1", "--save-weights", dir.file(loop)}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  expect_same_weights(dir.file("custom"), dir.file("fit"));
  // And bf16 really ran: the uncompressed job ends elsewhere.
  auto plain = launch_job(
      compressed_workers("none", {"--epochs", "1", "--save-weights", dir.file("plain")}));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_GT(testing::max_relative_difference(testing::weights_in(dir.file("plain")),
                                             testing::weights_in(dir.file("custom"))),
            0.0);
}

// The 20M-parameter MLP (80 MB of float32 gradients a step): by the library's own count, 16 bits
// halve what a worker sends and PowerSGD at rank 4 sends less than a twentieth.
TEST(DistTrainCompressionTest, EachCompressionCutsTheBytesAWorkerSendsAsDesigned) {
  std::map<std::string, int64_t> bytes;
  for (const std::string compression : {"none", "bf16", "fp16", "powersgd:4:0"}) {
    auto result = launch_job(
        compressed_workers(compression, {"--model", "mlp", "--max-steps", "3", "--epochs", "1"}));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    bytes[compression] = bytes_per_step(result);
  }
  // Its 20M parameters x 4 bytes, once across (2 workers: 2(N-1)/N = 1).
  EXPECT_GT(bytes["none"], 80'000'000);
  for (const std::string half : {"bf16", "fp16"}) {
    const double ratio = static_cast<double>(bytes["none"]) / bytes[half];
    EXPECT_GT(ratio, 1.99) << half;
    EXPECT_LT(ratio, 2.01) << half;
  }
  EXPECT_GT(static_cast<double>(bytes["none"]) / bytes["powersgd:4:0"], 20.0)
      << bytes["powersgd:4:0"];
}

// The flags are refused as they are parsed: the first as a dist-train process, the others through
// dist-train's checks in this process (testing::dist_train_checks).
TEST(DistTrainCompressionTest, StrategiesWithoutACollectiveOfGradientsRefuseItWithTheReason) {
  auto ps =
      run_dist_train_alone({"--strategy", "parameter_server", "--gradient-compression", "bf16"});
  EXPECT_EQ(ps.exit_code, 2) << ps.output;
  EXPECT_NE(ps.output.find("ps tasks"), std::string::npos) << ps.output;
  auto one = testing::dist_train_checks(
      {"--strategy", "one_device", "--gradient-compression", "powersgd:4"});
  EXPECT_EQ(one.exit_code, 2) << one.output;
  EXPECT_NE(one.output.find("one replica"), std::string::npos) << one.output;
  auto unknown = testing::dist_train_checks({"--gradient-compression", "int8"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("'int8'"), std::string::npos) << unknown.output;
}

}  // namespace
}  // namespace dist
