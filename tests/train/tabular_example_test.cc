// examples/tabular/tabular_regression.cc run as a user runs it, small: Friedman's function #1
// with noise of variance 1 written as TFRecord shards of tf.train.Example, learned by an MLP
// with mean squared error on 2 replicas; the test set's error must come close to the noise
// and far below that of predicting the mean.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::TempDir;
using testing::WorkerProcesses;

using testing::run_program;

TEST(TabularExampleTest, AnMlpLearnsTheFunctionFromTfRecordsWithMse) {
  TempDir dir;
  const std::string data = dir.file("data");
  const ProcessResult prepare =
      run_program(TABULAR_EXAMPLE_BINARY, {"prepare", data, "8000", "3"}, 180s);
  ASSERT_EQ(prepare.exit_code, 0) << prepare.output;
  EXPECT_TRUE(testing::contains(prepare.output, "Wrote 8000 rows of 10 features"))
      << prepare.output;
  const ProcessResult train =
      run_program(TABULAR_EXAMPLE_BINARY, {"train", data, "mirrored", "3000", "32"}, 180s);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      train.output, match,
      std::regex("Test MSE ([0-9.]+) over 800 rows \\(noise variance 1.0; predicting the mean: "
                 "([0-9.]+)\\)")))
      << train.output;
  const double mse = std::stod(match[1].str()), mean = std::stod(match[2].str());
  std::printf("test MSE %.4f; predicting the mean %.4f\n", mse, mean);
  EXPECT_GT(mean, 15.0);        // the function varies (its variance is about 24)
  EXPECT_LT(mse, 0.15 * mean);  // the MLP learned most of it
  EXPECT_GT(mse, 0.7);          // and not the noise (variance 1), as no model can

  // A bad command is refused with the usage.
  const ProcessResult bad = run_program(TABULAR_EXAMPLE_BINARY, {"trian", data}, 180s);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(testing::contains(bad.output, "unknown command 'trian'")) << bad.output;
}

}  // namespace
}  // namespace dist
