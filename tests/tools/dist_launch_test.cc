// dist-launch with real dist-train workers on 127.0.0.1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace dist {
namespace {

struct CommandResult {
  int exit_code;
  std::string output;
  double seconds;
};

CommandResult run_launcher(const std::string& args, int timeout_seconds = 300) {
  const auto start = std::chrono::steady_clock::now();
  std::string command = "timeout -s KILL " + std::to_string(timeout_seconds) + " " +
                        DIST_LAUNCH_BINARY + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed", 0};
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  int status = pclose(pipe);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output, seconds};
}

TEST(DistLaunchTest, TwoWorkersTrainWithPrefixedOutputAndChiefOnlyResults) {
  auto run =
      run_launcher("--workers 2 --replicas-per-worker 2 -- " + std::string(DIST_TRAIN_BINARY) +
                   " --strategy multi_worker --train-examples 512 --epochs 1"
                   " --batch-per-replica 16 --no-progress --collective-timeout 60");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("[worker:0] Number of devices: 4"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("[worker:1] Number of devices"), std::string::npos) << run.output;
  // The chief's last line is the JSON result.
  std::istringstream lines(run.output);
  std::string line, json;
  while (std::getline(lines, line))
    if (line.rfind("[worker:0] {", 0) == 0) json = line.substr(11);
  ASSERT_FALSE(json.empty()) << run.output;
  auto result = nlohmann::json::parse(json);
  EXPECT_EQ(result["strategy"], "multi_worker");
  EXPECT_EQ(result["num_replicas_in_sync"], 4);
  EXPECT_EQ(result["global_batch"], 64);
  EXPECT_EQ(result["steps"], 8);  // 512 / 64
  EXPECT_GT(result["test_accuracy"].get<double>(), 0.1);
}

TEST(DistLaunchTest, OneFailingWorkerStopsAllAndItsExitCodeIsReturned) {
  // A bad flag value makes every worker exit with code 2 before any rendezvous completes.
  auto run = run_launcher("--workers 2 --grace-seconds 5 -- " + std::string(DIST_TRAIN_BINARY) +
                          " --strategy multi_worker --epochs 0");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--epochs must be at least 1"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 30);

  auto missing = run_launcher("--workers 2 -- /nonexistent/program");
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run /nonexistent/program"), std::string::npos);
}

}  // namespace
}  // namespace dist
