// examples/torchscript_mirrored.cc run as a user runs it, briefly: the scripted small CNN from
// Python trained for a few steps under MirroredStrategy x2 and written back. Python's
// torch.jit.load of the written file (Debian's python3-torch, through
// examples/python/evaluate_torchscript.py) computes the example's own logits within 1e-6 and
// its accuracy exactly, and the safetensors file holds the written module's trained values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "dist/models/torchscript_model.h"
#include "dist/train/safetensors.h"
#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"

namespace dist::models {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::TempDir;
using testing::WorkerProcesses;

constexpr int64_t kTestImages = 200;

using testing::run_program;

at::Tensor floats_of(const std::string& path, int64_t columns) {
  const std::string bytes = testing::read_file(path);
  const int64_t rows = static_cast<int64_t>(bytes.size() / sizeof(float)) / columns;
  at::Tensor values = torch::empty({rows, columns});
  EXPECT_EQ(bytes.size(), values.nbytes()) << path;
  std::memcpy(values.data_ptr(), bytes.data(), std::min(bytes.size(), values.nbytes()));
  return values;
}

// The first capture group of `pattern` in `text`, "" when it does not match.
std::string find(const std::string& text, const std::string& pattern) {
  std::smatch match;
  return std::regex_search(text, match, std::regex(pattern)) ? match[1].str() : "";
}

TEST(TorchScriptExampleTest, TrainsWritesBackAndPythonComputesTheSameOutputs) {
  TempDir dir;
  const std::string model = std::string(DIST_TORCHSCRIPT_TEST_DIR) + "/cnn_scripted.pt";
  const std::string out = dir.file("out");
  const ProcessResult example = run_program(TORCHSCRIPT_EXAMPLE_BINARY,
                                            {model, out, "20", std::to_string(kTestImages)}, 120s);
  ASSERT_EQ(example.exit_code, 0) << example.output;
  EXPECT_TRUE(testing::contains(example.output, "on 2 replicas")) << example.output;
  EXPECT_TRUE(testing::contains(example.output, "step 20: loss")) << example.output;
  const std::string correct = find(example.output, "Test accuracy [0-9.]+ \\(([0-9]+) of " +
                                                       std::to_string(kTestImages) + " images\\)");
  ASSERT_NE(correct, "") << example.output;

  const ProcessResult python =
      run_program(DIST_TORCH_PYTHON,
                  {std::string(DIST_SOURCE_DIR) + "/examples/python/evaluate_torchscript.py",
                   out + "/trained.pt", out + "/test_images.f32", "--labels",
                   out + "/test_labels.i64", "--outputs", dir.file("python.f32")},
                  120s);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  const std::string accuracy = find(python.output, "\"accuracy\": ([0-9.e-]+)");
  ASSERT_NE(accuracy, "") << python.output;
  EXPECT_EQ(std::lround(std::stod(accuracy) * kTestImages), std::stoll(correct))
      << python.output << example.output;
  const at::Tensor ours = floats_of(out + "/test_logits.f32", 10);
  const at::Tensor theirs = floats_of(dir.file("python.f32"), 10);
  ASSERT_EQ(ours.size(0), kTestImages);
  ASSERT_EQ(theirs.sizes(), ours.sizes());
  const double difference = (theirs - ours).abs().max().item<double>();
  std::printf("Python's logits differ from the example's by %.3g at most\n", difference);
  EXPECT_LE(difference, 1e-6 * std::max(1.0, ours.abs().max().item<double>()));

  // The written module is the trained one, and the safetensors file holds its values.
  auto written = load_torchscript(out + "/trained.pt");
  EXPECT_FALSE(written->is_training());
  auto initial = load_torchscript(model)->named_parameters();
  auto values = written->named_parameters();
  for (const auto& item : written->named_buffers()) values.insert(item.key(), item.value());
  const SafetensorsFile weights = load_safetensors(out + "/trained.safetensors");
  ASSERT_EQ(weights.tensors.size(), values.size());
  for (const auto& [name, tensor] : weights.tensors) {
    ASSERT_TRUE(values.contains(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, values[name])) << name;
    if (const at::Tensor* before = initial.find(name)) {
      EXPECT_FALSE(torch::equal(tensor, *before)) << name << " did not train";
    }
  }
}

// A file that is not TorchScript is refused by name before anything trains; nothing is written.
TEST(TorchScriptExampleTest, AFileThatIsNotTorchScriptIsRefusedBeforeTraining) {
  TempDir dir;
  testing::write_file(dir.file("notes.pt"), "a model, honestly\n");
  const ProcessResult example = run_program(
      TORCHSCRIPT_EXAMPLE_BINARY, {dir.file("notes.pt"), dir.file("out"), "20", "200"}, 120s);
  EXPECT_EQ(example.exit_code, 1) << example.output;
  EXPECT_TRUE(testing::contains(example.output, "'" + dir.file("notes.pt") + "' is a text file"))
      << example.output;
  EXPECT_FALSE(testing::contains(example.output, "step ")) << example.output;
  EXPECT_EQ(testing::files_in(dir.path()), std::vector<std::string>{"notes.pt"});
}

}  // namespace
}  // namespace dist::models
