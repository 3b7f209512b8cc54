// examples/elastic_custom_loop.cc, a user's own custom loop made elastic with dist::run_elastic
// (dist/train/elastic.h), run as worker processes on 127.0.0.1: worker:1 is killed mid-run,
// the others go on from their last commit, worker:1 started again asks to join and is admitted,
// and the weights at the end equal those of the same loop on one worker that never changed
// size: the global batch is the same, only the order of the sums differs. The loop trains in
// float64, where that order costs about 1e-12 after 2000 steps; in float32 the rounding grows
// over so many steps until the weights differ in the second digit.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "dist/distribute/local_cluster.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::TempDir;
using testing::WorkerProcesses;

// Enough steps that the joiner, started once the loss is mended, asks before the job ends
// (about 1 s) while a few hundred steps remain; a commit every 10 steps admits it.
constexpr int kExampleSteps = 2000;
constexpr const char* kTrainExamples = "6400";

std::vector<std::string> example_args(const std::string& weights, int min_workers) {
  return {std::to_string(kExampleSteps), std::to_string(min_workers), weights, kTrainExamples,
          "float64"};
}

TEST(ElasticExampleTest, ACustomLoopLosesAWorkerTakesItBackAndEndsAtOneWorkersWeights) {
  TempDir dir;
  const auto ports = free_loopback_ports(3);
  const auto args = example_args(dir.file("elastic.safetensors"), 2);
  WorkerProcesses processes;
  for (int i = 0; i < 3; ++i)
    processes.start(ELASTIC_EXAMPLE_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, i)});
  ASSERT_TRUE(processes.wait_for_output(0, "step 100\n", 120s));
  processes.kill(1, SIGKILL);
  ASSERT_TRUE(processes.wait_for_output(0, "sizes 3 -> 2 (lost worker:1)", 120s));
  processes.start(ELASTIC_EXAMPLE_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, 1)});
  ASSERT_TRUE(processes.wait_for_output(3, "asked to join", 60s));
  const std::vector<ProcessResult> results = processes.wait_all(240s);
  EXPECT_EQ(results[1].exit_code, 128 + 9);  // SIGKILL
  for (size_t i : {0, 2, 3}) ASSERT_EQ(results[i].exit_code, 0) << results[i].output;
  const std::string& chief = results[0].output;
  EXPECT_TRUE(testing::contains(chief, "sizes 2 -> 3 (joined worker:1)")) << chief;
  EXPECT_TRUE(testing::contains(chief, "Resumed from the state committed in memory")) << chief;
  EXPECT_TRUE(testing::contains(
      chief, "Done: " + std::to_string(kExampleSteps) + " steps; workers per generation: 3 2 3"))
      << chief;
  EXPECT_TRUE(testing::contains(results[3].output, "(sent to the joining workers:") ||
              testing::contains(chief, "(sent to the joining workers:"))
      << results[3].output;

  WorkerProcesses alone;
  alone.start(ELASTIC_EXAMPLE_BINARY, example_args(dir.file("one.safetensors"), 1),
              {"TF_CONFIG=" + local_tf_config(free_loopback_ports(1), 0)});
  const ProcessResult one = alone.wait_all(240s).at(0);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_TRUE(testing::contains(one.output, "workers per generation: 1\n")) << one.output;
  const double difference =
      testing::max_relative_difference(testing::weights_in(dir.file("elastic.safetensors")),
                                       testing::weights_in(dir.file("one.safetensors")));
  std::cout << "max relative difference from one worker: " << difference << std::endl;
  EXPECT_LT(difference, 1e-9);
}

// The example refuses what cannot make a job, before anything starts.
TEST(ElasticExampleTest, MoreMinimumWorkersThanTheClusterHasIsRefused) {
  TempDir dir;
  WorkerProcesses processes;
  processes.start(ELASTIC_EXAMPLE_BINARY, example_args(dir.file("w.safetensors"), 3),
                  {"TF_CONFIG=" + local_tf_config(free_loopback_ports(2), 0)});
  const ProcessResult result = processes.wait_all(60s).at(0);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(
      testing::contains(result.output,
                        "min_workers 3 is more than the 2 workers of the cluster; the job could "
                        "never start"))
      << result.output;
}

}  // namespace
}  // namespace dist
