// examples/char_lm run as a user runs it, small: the lines of /usr/share/common-licenses/GPL-3
// as TFRecord shards, the GPT of examples/python/char_lm.py scripted by Python, trained by two
// worker processes on loopback under MultiWorkerMirroredStrategy with padded batches and the
// global-token loss, written back; Python computes the evaluation loss the chief printed and
// samples text. The same job on one process ends at the same evaluation loss.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "dist/distribute/local_cluster.h"
#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::TempDir;
using testing::WorkerProcesses;

constexpr const char* kText = "/usr/share/common-licenses/GPL-3";
constexpr const char* kSteps = "40";
constexpr const char* kBatch = "8";

using testing::run_program;

// The first capture group of `pattern` in `text`, "" when it does not match.
std::string find(const std::string& text, const std::string& pattern) {
  std::smatch match;
  return std::regex_search(text, match, std::regex(pattern)) ? match[1].str() : "";
}

TEST(CharLmExampleTest, TwoWorkersTrainItAndPythonReadsItBackToTheSameLoss) {
  TempDir dir;
  const std::string data = dir.file("data"), model = dir.file("model.pt");
  const std::string python_script = std::string(DIST_SOURCE_DIR) + "/examples/python/char_lm.py";
  const ProcessResult prepare = run_program(CHAR_LM_BINARY, {"prepare", kText, data}, 180s);
  ASSERT_EQ(prepare.exit_code, 0) << prepare.output;
  EXPECT_TRUE(testing::contains(prepare.output, "training and")) << prepare.output;
  const ProcessResult made = run_program(
      DIST_TORCH_PYTHON,
      {python_script, "model", data + "/vocab.bin", model, "--layers", "1", "--dim", "32"}, 180s);
  ASSERT_EQ(made.exit_code, 0) << made.output;

  // Two workers on loopback.
  const auto ports = free_loopback_ports(2);
  WorkerProcesses workers;
  for (int i = 0; i < 2; ++i)
    workers.start(CHAR_LM_BINARY, {"train", model, data, dir.file("two"), kSteps, kBatch},
                  {"TF_CONFIG=" + local_tf_config(ports, i)});
  const std::vector<ProcessResult> results = workers.wait_all(180s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string& chief = results[0].output;
  EXPECT_TRUE(testing::contains(chief, "on 2 workers, 16 sequences a step")) << chief;
  EXPECT_TRUE(testing::contains(chief, "Start-up check: TorchScript module '" + model +
                                           "': forward(tokens: Tensor, mask: Optional[Tensor] "
                                           "= ...) -> Tensor called with mask = a tensor of"))
      << chief;
  const std::string first = find(chief, "step 1: loss ([0-9.]+)");
  const std::string last = find(chief, std::string("step ") + kSteps + ": loss ([0-9.]+)");
  const std::string eval = find(chief, "Eval loss ([0-9.]+) over");
  ASSERT_NE(first, "") << chief;
  ASSERT_NE(last, "") << chief;
  ASSERT_NE(eval, "") << chief;
  std::printf("2 workers: loss %s at step 1, %s at step %s; eval loss %s\n", first.c_str(),
              last.c_str(), kSteps, eval.c_str());
  EXPECT_LT(std::stod(last), std::stod(first) - 0.5) << chief;

  // Python reads the written module back to the printed loss, and samples from it.
  const ProcessResult python =
      run_program(DIST_TORCH_PYTHON,
                  {python_script, "sample", dir.file("two") + "/trained.pt", data + "/vocab.bin",
                   "--eval", dir.file("two"), "--length", "60"},
                  180s);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  const std::string python_loss = find(python.output, "\"loss\": ([0-9.e-]+)");
  ASSERT_NE(python_loss, "") << python.output;
  EXPECT_NEAR(std::stod(python_loss), std::stod(eval), 2e-6) << python.output << chief;
  EXPECT_GT(python.output.size(), python.output.find('}') + 60) << python.output;

  // One process, the same global batch: the same evaluation loss.
  const ProcessResult one =
      run_program(CHAR_LM_BINARY, {"train", model, data, dir.file("one"), kSteps, "16"}, 180s);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::string one_eval = find(one.output, "Eval loss ([0-9.]+) over");
  ASSERT_NE(one_eval, "") << one.output;
  std::printf("1 worker: eval loss %s\n", one_eval.c_str());
  EXPECT_NEAR(std::stod(one_eval), std::stod(eval), 1e-4 * std::stod(eval)) << one.output;
}

// Sequences prepared longer than the model's max_len are named before training, with the file
// and the record, and nothing is trained.
TEST(CharLmExampleTest, ASequenceLongerThanTheModelAcceptsIsNamedBeforeTraining) {
  TempDir dir;
  const std::string data = dir.file("data"), model = dir.file("model.pt");
  const std::string python_script = std::string(DIST_SOURCE_DIR) + "/examples/python/char_lm.py";
  ASSERT_EQ(run_program(CHAR_LM_BINARY, {"prepare", kText, data, "2", "64"}, 180s).exit_code, 0);
  const ProcessResult made = run_program(DIST_TORCH_PYTHON,
                                         {python_script, "model", data + "/vocab.bin", model,
                                          "--layers", "1", "--dim", "32", "--max-len", "16"},
                                         180s);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const ProcessResult trained =
      run_program(CHAR_LM_BINARY, {"train", model, data, dir.file("out"), "5", "4"}, 180s);
  EXPECT_NE(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(testing::contains(trained.output, "longer than the model's max_len of 16"))
      << trained.output;
  EXPECT_TRUE(testing::contains(trained.output, "train-")) << trained.output;
  EXPECT_FALSE(testing::contains(trained.output, "Training ")) << trained.output;
}

}  // namespace
}  // namespace dist
