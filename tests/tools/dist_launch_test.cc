// dist-launch with real dist-train workers on 127.0.0.1, and with the tasks of
// parameter-server jobs (dist_test_ps_task, tests/ps/ps_task_main.cc).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multi_worker/process_group.h"
#include "run_program.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

namespace dist {
namespace {

using testing::environment_of;
using testing::gone;
using testing::job_gone_within;
using testing::processes_of_job;

using testing::CommandResult;

// dist-launch with the command line `args`, bounded by `timeout_seconds`.
CommandResult run_launcher(const std::string& args, int timeout_seconds = 300) {
  return testing::run_shell(std::string(DIST_LAUNCH_BINARY) + " " + args, timeout_seconds);
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
    if (::poll(&p, 1, 200) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::read(l.output, buffer, sizeof(buffer));
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

// Parameter-server jobs (--ps). Every job runs dist_test_ps_task as all its tasks.

using namespace std::chrono_literals;

std::string ps_task_command(int steps, const std::string& out) {
  return std::string(DIST_TEST_PS_TASK_BINARY) + " train sgd " + std::to_string(steps) + " " + out;
}

// The child of `launcher` that runs task `type`:`index` (by its TF_CONFIG), or -1.
pid_t task_pid(pid_t launcher, const std::string& type, int index) {
  const std::string task =
      R"("task": {"type": ")" + type + R"(", "index": )" + std::to_string(index) + "}";
  for (pid_t child : children_of(launcher))
    for (const auto& entry : environment_of(child))
      if (entry.rfind("TF_CONFIG=", 0) == 0 && testing::contains(entry, task)) return child;
  return -1;
}

// A token that names one test's job, to find its processes.
std::string job_token(const std::string& test) {
  return "dist-launch-test-" + std::to_string(getpid()) + "-" + test;
}

TEST(DistLaunchTest, ParameterServerJobTrainsAndShowsEveryTask) {
  testing::TempDir dir;
  auto run =
      run_launcher("--workers 2 --ps 1 -- " + ps_task_command(10, dir.file("w.safetensors")), 120);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(access(dir.file("w.safetensors").c_str(), F_OK), 0) << run.output;
  EXPECT_TRUE(testing::contains(run.output, "[chief] trained 10 steps")) << run.output;
  for (const std::string task : {"chief", "worker:0", "worker:1", "ps:0"}) {
    SCOPED_TRACE(task);
    EXPECT_TRUE(testing::contains(run.output, "[dist-launch] started " + task + " (pid "))
        << run.output;
    EXPECT_TRUE(testing::contains(run.output, "\n[" + task + "] "))
        << run.output;  // its own output
    // The others exit by themselves once the chief has shut the job down.
    EXPECT_TRUE(testing::contains(run.output, "[dist-launch] " + task + " exited with code 0"))
        << run.output;
  }
  EXPECT_FALSE(testing::contains(run.output, "SIGTERM")) << run.output;
}

TEST(DistLaunchTest, FailingEvaluatorDoesNotStopAParameterServerJob) {
  // The evaluator's task makes no strategy in a real job; dist_test_ps_task makes one, which
  // refuses an evaluator: it exits 1 at once, and training goes on.
  testing::TempDir dir;
  auto run = run_launcher(
      "--workers 1 --ps 1 --evaluator -- " + ps_task_command(5, dir.file("w.safetensors")), 120);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(testing::contains(run.output, "[dist-launch] started evaluator (pid ")) << run.output;
  EXPECT_TRUE(testing::contains(run.output, "[evaluator] ")) << run.output;
  EXPECT_TRUE(testing::contains(run.output, "[dist-launch] evaluator exited with code 1\n"))
      << run.output;
  EXPECT_TRUE(testing::contains(run.output,
                                "dist-launch: warning: the evaluator exited with code 1 before it "
                                "had evaluated the last checkpoint"))
      << run.output;
  EXPECT_TRUE(testing::contains(run.output, "[chief] trained 5 steps")) << run.output;
  EXPECT_EQ(access(dir.file("w.safetensors").c_str(), F_OK), 0);
}

// worker:1 SIGKILLed in the middle of a step: dist-launch starts it again with the same
// TF_CONFIG, the chief finishes the training, and every task ends.
TEST(DistLaunchTest, RestartWorkersStartsAKilledWorkerAgain) {
  testing::TempDir dir;
  const std::string token = job_token("RestartWorkers");
  testing::WorkerProcesses launcher;
  launcher.start(
      DIST_LAUNCH_BINARY,
      {"--workers", "2", "--ps", "1", "--restart-workers", "--", DIST_TEST_PS_TASK_BINARY, "train",
       "sgd", "40", dir.file("w.safetensors")},
      {"DIST_JOB_TOKEN=" + token, "DIST_TEST_STEP_SLEEP_MS=200", "DIST_TEST_TIMEOUT_MS=10000"});
  ASSERT_TRUE(launcher.wait_for_output(0, "[worker:1] step done", 60s));
  const pid_t worker = task_pid(launcher.pid(0), "worker", 1);
  ASSERT_GT(worker, 0);
  ASSERT_GE(processes_of_job(token).size(), 5u);  // the launcher, its 4 tasks (and their children)
  std::this_thread::sleep_for(100ms);             // inside its next step's 200 ms
  kill(worker, SIGKILL);
  const auto results = launcher.wait_all(120s);
  const std::string& output = results[0].output;
  EXPECT_EQ(results[0].exit_code, 0) << output;
  EXPECT_TRUE(testing::contains(output,
                                "[dist-launch] worker:1 exited with signal 9 (Killed); starting it "
                                "again (restart 1 of at most 10)"))
      << output;
  EXPECT_EQ(testing::occurrences(output, "[dist-launch] started worker:1 (pid "), 2) << output;
  EXPECT_TRUE(testing::contains(output, "[chief] trained 40 steps")) << output;
  EXPECT_TRUE(testing::contains(output, "[dist-launch] worker:1 exited with code 0"))
      << output;  // again
  EXPECT_TRUE(job_gone_within(token, 10)) << "a task of the job outlived dist-launch";
}

// A ps task lost: dist-launch does not stop the job but waits for the chief, which fails by
// itself naming the ps task; the exit code is the chief's.
TEST(DistLaunchTest, LostPsEndsTheJobWithTheChiefsExitCode) {
  testing::TempDir dir;
  const std::string token = job_token("LostPs");
  testing::WorkerProcesses launcher;
  launcher.start(
      DIST_LAUNCH_BINARY,
      {"--workers", "1", "--ps", "1", "--grace-seconds", "5", "--", DIST_TEST_PS_TASK_BINARY,
       "train", "sgd", "1000", dir.file("w.safetensors")},
      {"DIST_JOB_TOKEN=" + token, "DIST_TEST_STEP_SLEEP_MS=20", "DIST_TEST_TIMEOUT_MS=3000"});
  ASSERT_TRUE(launcher.wait_for_output(0, "[worker:0] step done", 60s));
  const pid_t ps = task_pid(launcher.pid(0), "ps", 0);
  ASSERT_GT(ps, 0);
  ASSERT_GE(processes_of_job(token).size(), 4u);  // the launcher, its 3 tasks (and their children)
  kill(ps, SIGKILL);
  const auto results = launcher.wait_all(60s);
  const std::string& output = results[0].output;
  EXPECT_EQ(results[0].exit_code, 1) << output;
  const size_t ps_exit = output.find("[dist-launch] ps:0 exited with signal 9 (Killed)\n");
  const size_t chief_exit = output.find("[dist-launch] chief exited with code 1");
  ASSERT_NE(ps_exit, std::string::npos) << output;
  ASSERT_NE(chief_exit, std::string::npos) << output;
  EXPECT_LT(ps_exit, chief_exit) << output;
  EXPECT_TRUE(testing::contains(output, "[chief] ")) << output;
  EXPECT_TRUE(testing::contains(output, "parameter server ps:0 (127.0.0.1:")) << output;
  EXPECT_TRUE(testing::contains(output, "dist-launch: chief failed with exit code 1")) << output;
  EXPECT_TRUE(job_gone_within(token, 10)) << "a task of the job outlived dist-launch";
}

// The chief SIGKILLed: the other tasks get --grace-seconds, then SIGTERM; --max-restarts
// then starts the whole job again on fresh ports, and its chief trains to the end.
TEST(DistLaunchTest, MaxRestartsStartsAParameterServerJobAgainWhenTheChiefFails) {
  testing::TempDir dir;
  const std::string token = job_token("MaxRestartsPs");
  testing::WorkerProcesses launcher;
  launcher.start(
      DIST_LAUNCH_BINARY,
      {"--workers", "1", "--ps", "1", "--grace-seconds", "2", "--max-restarts", "1", "--",
       DIST_TEST_PS_TASK_BINARY, "train", "sgd", "20", dir.file("w.safetensors")},
      {"DIST_JOB_TOKEN=" + token, "DIST_TEST_STEP_SLEEP_MS=100", "DIST_TEST_TIMEOUT_MS=10000"});
  ASSERT_TRUE(launcher.wait_for_output(0, "[worker:0] step done", 60s));
  const pid_t chief = task_pid(launcher.pid(0), "chief", 0);
  ASSERT_GT(chief, 0);
  kill(chief, SIGKILL);
  const auto results = launcher.wait_all(120s);
  const std::string& output = results[0].output;
  EXPECT_EQ(results[0].exit_code, 0) << output;
  EXPECT_TRUE(
      testing::contains(output,
                        "[dist-launch] chief exited with signal 9 (Killed); the other tasks "
                        "have 2 s (--grace-seconds) to exit by themselves"))
      << output;
  // They wait for the coordinator 10 s: SIGTERM ends them first.
  EXPECT_TRUE(testing::contains(
      output,
      "still running after its time since the chief exited: ps:0 worker:0; sending SIGTERM"))
      << output;
  EXPECT_TRUE(testing::contains(output, "[dist-launch] restarting the job (restart 1 of 1)"))
      << output;
  EXPECT_EQ(testing::occurrences(output, "[dist-launch] started chief (pid "), 2) << output;
  EXPECT_TRUE(testing::contains(output, "[chief] trained 20 steps")) << output;
  EXPECT_EQ(access(dir.file("w.safetensors").c_str(), F_OK), 0);
  EXPECT_TRUE(job_gone_within(token, 10)) << "a task of the job outlived dist-launch";
}

// dist-launch of 2 workers and 1 ps restarting the job once, running dist-train for 400 steps
// of the parameter server strategy with a checkpoint every 20 in `checkpoints`.
std::vector<std::string> ps_restart_launch(const std::string& checkpoints) {
  // dist-launch's flags, then after "--" dist-train and its flags; a flag and its value on a line.
  // clang-format off
  return {"--workers", "2", "--ps", "1", "--grace-seconds", "2", "--max-restarts", "1", "--",
          DIST_TRAIN_BINARY, "--strategy", "parameter_server", "--train-examples", "640",
          "--batch-per-replica", "32", "--epochs", "1", "--steps-per-epoch", "400",
          "--checkpoint-every", "20", "--checkpoint-dir", checkpoints, "--no-progress",
          "--collective-timeout", "5", "--rendezvous-timeout", "60"};
  // clang-format on
}

// The JSON result of the chief's last run: its last line "[chief] {...}" (null if none).
nlohmann::json last_chief_result(const std::string& output) {
  std::istringstream lines(output);
  std::string line, json;
  while (std::getline(lines, line))
    if (line.rfind("[chief] {", 0) == 0) json = line.substr(8);
  return json.empty() ? nlohmann::json() : nlohmann::json::parse(json);
}

// The issue's ps-loss case end to end with dist-train: ps:0 SIGKILLed after the chief's
// checkpoint of step 20; the chief fails within --collective-timeout naming the ps task,
// --max-restarts starts the job again on fresh ports, and its chief resumes from its last
// checkpoint and trains to the end. (That the restore brings back the values and Adam's slots
// exactly is ParameterServerJobTest's to show.)
TEST(DistLaunchTest, LostPsUnderDistTrainRestartsAndResumesFromTheLastCheckpoint) {
  testing::TempDir dir;
  const std::string token = job_token("PsRestart");
  const std::string checkpoints = dir.file("ckpt");
  testing::WorkerProcesses launcher;
  launcher.start(DIST_LAUNCH_BINARY, ps_restart_launch(checkpoints), {"DIST_JOB_TOKEN=" + token});
  ASSERT_TRUE(appears_within(checkpoints + "/ckpt-20.safetensors", 120))
      << launcher.wait_all(10s)[0].output;
  const pid_t ps = task_pid(launcher.pid(0), "ps", 0);
  ASSERT_GT(ps, 0);
  const auto killed = std::chrono::steady_clock::now();
  kill(ps, SIGKILL);
  ASSERT_TRUE(launcher.wait_for_output(0, "[dist-launch] chief exited with code 1", 60s))
      << launcher.wait_all(10s)[0].output;
  // The RPC deadline is 5 s; the coordinator's failure reaches the chief's loop within a few.
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 30s);
  const auto results = launcher.wait_all(240s);
  const std::string& output = results[0].output;
  EXPECT_EQ(results[0].exit_code, 0) << output;
  EXPECT_TRUE(testing::contains(output, "[dist-launch] ps:0 exited with signal 9 (Killed)"))
      << output;
  EXPECT_TRUE(testing::contains(output, "parameter server ps:0 (127.0.0.1:")) << output;
  EXPECT_TRUE(testing::contains(output, "[dist-launch] restarting the job (restart 1 of 1)"))
      << output;
  // The restarted chief resumes at a checkpoint of step 20 or later (the chief may have saved
  // another before it noticed the loss) and finishes the 400 steps.
  const size_t resumed = output.find("[chief] Resumed from " + checkpoints + "/ckpt-");
  ASSERT_NE(resumed, std::string::npos) << output;
  const int64_t resumed_at = std::stoll(output.substr(output.find(" at step ", resumed) + 9));
  EXPECT_GE(resumed_at, 20) << output;
  EXPECT_LT(resumed_at, 400) << output;
  const auto result = last_chief_result(output);
  ASSERT_FALSE(result.is_null()) << output;
  EXPECT_EQ(result["steps"], 400) << result;
  EXPECT_EQ(result["resumed_at_step"], resumed_at) << result;
  EXPECT_GT(result["test_accuracy"].get<double>(), 0.5) << result;
  EXPECT_TRUE(job_gone_within(token, 10)) << "a task of the job outlived dist-launch";
}

TEST(DistLaunchTest, ParameterServerFlagsThatMakeNoJobAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--ps -1", "--ps must be 0 or more, got -1"},
      {"--workers 2 --restart-workers", "--restart-workers needs --ps"},
      {"--workers 2 --evaluator", "--evaluator needs --ps"},
      {"--workers 0 --ps 1", "--workers must be at least 1 with --ps"},
  };
  for (const auto& [flags, error] : cases) {
    SCOPED_TRACE(flags);
    auto run = run_launcher(flags + " -- /bin/true", 30);
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_TRUE(testing::contains(run.output, "dist-launch: " + error)) << run.output;
    EXPECT_FALSE(testing::contains(run.output, "[dist-launch] started")) << run.output;
  }
}

}  // namespace
}  // namespace dist
