// dist-launch with real dist-train workers on 127.0.0.1.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

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
  EXPECT_NE(run.output.find("--epochs"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 30);

  auto missing = run_launcher("--workers 2 -- /nonexistent/program");
  EXPECT_EQ(missing.exit_code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run /nonexistent/program"), std::string::npos);
}

// dist-launch started directly (not through a shell), so the test knows its pid.
struct Launched {
  pid_t pid = -1;
  int output = -1;  // its stdout and stderr
  std::string seen;
};

Launched spawn_launcher(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  Launched l;
  l.pid = fork();
  if (l.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv{const_cast<char*>(DIST_LAUNCH_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(DIST_LAUNCH_BINARY, argv.data());
    _exit(127);
  }
  close(fds[1]);
  l.output = fds[0];
  return l;
}

// Reads the launcher's output until `text` appears, it closes, or `seconds` pass.
bool read_until(Launched& l, const std::string& text, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (l.seen.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    pollfd p{l.output, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(l.output, buffer, sizeof(buffer));
    if (n <= 0) return l.seen.find(text) != std::string::npos;
    l.seen.append(buffer, static_cast<size_t>(n));
  }
  return true;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> children;
  for (pid_t child; in >> child;) children.push_back(child);
  return children;
}

// Gone, or a zombie nobody reaped yet (it no longer runs).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, name, state;
  if (!(stat >> pid_field >> name >> state)) return true;
  return state == "Z";
}

bool all_gone_within(const std::vector<pid_t>& pids, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (pid_t p : pids) all = all && gone(p);
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Whether `path` exists within `seconds`.
bool appears_within(const std::string& path, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// A job long enough to be interrupted while training; it saves after its first step, so the
// checkpoint pointer's appearance shows that every worker is in the training loop.
std::vector<std::string> long_job(const std::string& checkpoint_dir) {
  return {"--workers",
          "2",
          "--grace-seconds",
          "20",
          "--",
          DIST_TRAIN_BINARY,
          "--strategy",
          "multi_worker",
          "--epochs",
          "50",
          "--no-progress",
          "--global-batch",
          "64",
          "--checkpoint-dir",
          checkpoint_dir,
          "--checkpoint-every",
          "1",
          "--collective-timeout",
          "60"};
}

TEST(DistLaunchTest, KilledLauncherTakesItsWorkersWithIt) {
  testing::TempDir dir;
  Launched launcher = spawn_launcher(long_job(dir.file("ckpt")));
  ASSERT_GT(launcher.pid, 0);
  ASSERT_TRUE(appears_within(dir.file("ckpt/checkpoint"), 120)) << launcher.seen;
  const auto workers = children_of(launcher.pid);
  ASSERT_EQ(workers.size(), 2u) << launcher.seen;
  kill(launcher.pid, SIGKILL);
  waitpid(launcher.pid, nullptr, 0);
  const bool stopped = all_gone_within(workers, 60);
  for (pid_t w : workers) kill(-w, SIGKILL);  // cleanup whatever the assertion finds
  close(launcher.output);
  EXPECT_TRUE(stopped) << "a worker outlived the SIGKILLed dist-launch";
}

TEST(DistLaunchTest, HangUpStopsTheWorkersResumablyAndSaysSoInTheExitCode) {
  testing::TempDir dir;
  Launched launcher = spawn_launcher(long_job(dir.file("ckpt")));
  ASSERT_GT(launcher.pid, 0);
  ASSERT_TRUE(appears_within(dir.file("ckpt/checkpoint"), 120)) << launcher.seen;
  const auto workers = children_of(launcher.pid);
  kill(launcher.pid, SIGHUP);
  read_until(launcher, "\n<never printed>\n", 90);  // to EOF: every worker has closed
  int status = 0;
  waitpid(launcher.pid, &status, 0);
  close(launcher.output);
  const bool stopped = all_gone_within(workers, 10);
  for (pid_t w : workers) kill(-w, SIGKILL);
  EXPECT_TRUE(stopped);
  ASSERT_TRUE(WIFEXITED(status)) << launcher.seen;
  EXPECT_EQ(WEXITSTATUS(status), 4) << launcher.seen;
  EXPECT_NE(launcher.seen.find("[worker:0] Stopped by signal 15"), std::string::npos)
      << launcher.seen;
  EXPECT_NE(launcher.seen.find("checkpoint saved"), std::string::npos) << launcher.seen;
}

}  // namespace
}  // namespace dist
