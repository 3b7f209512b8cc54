// examples/images/colour_images.cc, the guide's "Images" program, run as a user runs it on a
// folder of colour images of mixed sizes and kinds in 5 classes (tests/tools/new_user_images.py
// writes it, with a CNN scripted in Python): it trains, and Python's torchvision reads the
// written module back to the test accuracy the program printed; the built-in CNN trains too.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"
#include "tools/train_runs.h"

namespace dist {
namespace {

using namespace std::chrono_literals;

const std::string kColourImagesScript =
    std::string(DIST_SOURCE_DIR) + "/tests/tools/new_user_images.py";

using testing::run_program;

TEST(ColourImagesExampleTest, TrainsAScriptedModelThatPythonReadsBackToThePrintedAccuracy) {
  testing::TempDir dir;
  const std::string root = dir.file("data");
  ASSERT_EQ(run_program(DIST_TORCH_PYTHON, {kColourImagesScript, "make", root}, 180s).exit_code, 0);
  const std::string trained = dir.file("trained.pt");
  const auto result =
      run_program(COLOUR_IMAGES_BINARY,
                  {root + "/train", root + "/test", "10", "64", root + "/cnn5.pt", trained}, 180s);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto printed = testing::last_json(result.output);
  ASSERT_FALSE(printed.is_null()) << result.output;
  const double ours = printed["test_accuracy"].get<double>();
  EXPECT_GT(ours, 0.45) << "5 classes: chance is 0.2\n" << result.output;

  const auto python = run_program(DIST_TORCH_PYTHON,
                                  {kColourImagesScript, "evaluate", trained, root + "/test",
                                   "64x64", "0.485,0.456,0.406", "0.229,0.224,0.225"},
                                  180s);
  ASSERT_EQ(python.exit_code, 0) << python.output;
  const double theirs = testing::last_json(python.output)["accuracy"].get<double>();
  // The resize matches PIL's within a grey level: at most one of the 60 predictions may differ.
  EXPECT_LE(std::abs(ours - theirs), 1.0 / 60 + 1e-9) << ours << " vs Python's " << theirs;

  // The built-in CNN, built for 32x32 RGB images and the folder's 5 classes.
  const auto builtin =
      run_program(COLOUR_IMAGES_BINARY, {root + "/train", root + "/test", "3", "32"}, 180s);
  ASSERT_EQ(builtin.exit_code, 0) << builtin.output;
  EXPECT_GT(testing::last_json(builtin.output)["test_accuracy"].get<double>(), 0.3)
      << builtin.output;
}

}  // namespace
}  // namespace dist
