// The start-up of multi-worker dist-train jobs and their reruns, with real processes on
// 127.0.0.1 (issue 55's probe): a job run again at once on the same addresses trains (it never
// takes the previous job's store, or its state, for its own), SIGTERM ends every wait of the
// start-up within a second with exit 4, a worker killed at any point of an elastic job's
// start-up is seen at once, and an elastic job whose store is killed stops, naming it.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/distribute/local_cluster.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::ProcessResult;
using testing::TempDir;
using testing::WorkerProcesses;

// The probe's job: 10 SGD steps of global batch 60 on 2000 examples.
std::vector<std::string> short_job(bool elastic) {
  std::vector<std::string> args{"--strategy",      "multi_worker", "--train-examples", "2000",
                                "--test-examples", "500",          "--max-steps",      "10",
                                "--global-batch",  "60",           "--optimizer",      "sgd",
                                "--no-progress"};
  if (elastic) args.insert(args.end(), {"--min-workers", "1"});
  return args;
}

// The chief's JSON line in a dist-launch output.
nlohmann::json launched_chief_json(const std::string& output) {
  return testing::last_json(output, "[worker:0] ");
}

// Runs the two workers of `args` on `ports` (with DIST_JOB_TOKEN=token unless empty) to the end.
std::vector<ProcessResult> run_pair(const std::vector<int>& ports,
                                    const std::vector<std::string>& args,
                                    const std::string& token) {
  WorkerProcesses processes;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> env{"TF_CONFIG=" + local_tf_config(ports, i)};
    if (!token.empty()) env.push_back("DIST_JOB_TOKEN=" + token);
    processes.start(DIST_TRAIN_BINARY, args, env);
  }
  return processes.wait_all(120s);
}

// Issue 55, 1 and 2: the elastic job's store outlived its job by seconds, holding its finished
// marker. The second run found it, and every worker printed "the elastic job finished (at step
// 10) ...; nothing to do" and exited 0 without training; with a new token, worker:1 was refused
// ("the job token does not match") and worker:0 waited out the rendezvous. Now each run's
// workers leave that store to close and start their own job.
TEST(JobRerunTest, AnElasticJobRunFiveTimesBackToBackOnTheSamePortsTrainsEveryTime) {
  const auto ports = free_loopback_ports(2);
  const std::vector<std::string> tokens{"", "first-token-0123456789", "second-token-0123456789", "",
                                        "third-token-0123456789"};
  for (size_t run = 0; run < tokens.size(); ++run) {
    const auto results = run_pair(ports, short_job(true), tokens[run]);
    for (const auto& result : results) {
      ASSERT_EQ(result.exit_code, 0) << "run " << run + 1 << ":\n" << result.output;
      EXPECT_FALSE(testing::contains(result.output, "nothing to do")) << result.output;
    }
    const auto json = testing::last_json(results[0].output);
    ASSERT_FALSE(json.is_null()) << "run " << run + 1 << " trained nothing:\n" << results[0].output;
    EXPECT_EQ(json["steps"], 10) << results[0].output;
    std::printf("run %zu (%s token): %.1f s\n", run + 1, tokens[run].empty() ? "no" : "a new",
                results[0].seconds);
  }
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 20s));
}

// A fixed job, rerun at once: its store closes as soon as its workers have left.
TEST(JobRerunTest, AFixedJobRunTwiceBackToBackOnTheSamePortsTrainsBothTimes) {
  const auto ports = free_loopback_ports(2);
  for (int run = 0; run < 2; ++run) {
    const auto results = run_pair(ports, short_job(false), "");
    for (const auto& result : results) ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(testing::last_json(results[0].output)["steps"], 10) << results[0].output;
  }
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 20s));
}

// Issue 55, 2: the probe's dist-launch run twice: the second launch's worker:1 spent all its
// restarts in 5 s against the first one's store. Each launch is a job of its own identity
// (DIST_JOB_ID) and token.
TEST(JobRerunTest, DistLaunchRunTwiceOnTheSamePortsTrainsBothTimes) {
  const int port = free_loopback_ports(1).at(0);
  std::vector<std::string> args{"--workers",
                                "1:2",
                                "--hosts",
                                "127.0.0.1",
                                "--host-command",
                                "sh -c",
                                "--port-base",
                                std::to_string(port),
                                "--",
                                DIST_TRAIN_BINARY};
  for (const auto& flag : short_job(false)) args.push_back(flag);
  for (int run = 0; run < 2; ++run) {
    const ProcessResult result = testing::launch_job(args);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(launched_chief_json(result.output)["steps"], 10) << result.output;
    EXPECT_FALSE(testing::contains(result.output, "starting it again")) << result.output;
  }
  EXPECT_TRUE(testing::wait_until_store_host_gone(port, 20s));
}

// Whether process `pid` catches `signal_number` (the SigCgt mask of /proc/<pid>/status).
bool catches(pid_t pid, int signal_number) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0)
      return (std::stoull(line.substr(7), nullptr, 16) >> (signal_number - 1)) & 1;
  return false;
}

// Seconds until process `index` of `processes` catches `signal_number` (at most 30 s).
double wait_until_it_catches(WorkerProcesses& processes, size_t index, int signal_number) {
  const auto started = std::chrono::steady_clock::now();
  while (!catches(processes.pid(index), signal_number) &&
         std::chrono::steady_clock::now() - started < 30s)
    std::this_thread::sleep_for(1ms);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

// Issue 55, 3: worker `task` of a two-worker job alone (worker:0 in the rendezvous, worker:1
// connecting to a store nobody started); SIGTERM `after` into it. It exits 4 within 2 s (it
// ignored the signal until the rendezvous timeout, then exited 1), and its store's host closes
// at once. `after` counts from the moment it catches SIGTERM: the dynamic loader's time before
// cannot be watched (docs/dist-train.md) and took over a second on a loaded CI machine.
void expect_sigterm_ends_the_start_up(const std::vector<std::string>& more,
                                      std::chrono::milliseconds after, int task = 0) {
  const auto ports = free_loopback_ports(2);
  std::vector<std::string> args = short_job(false);
  args.insert(args.end(), {"--rendezvous-timeout", "60"});
  args.insert(args.end(), more.begin(), more.end());
  WorkerProcesses processes;
  processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, task)});
  wait_until_it_catches(processes, 0, SIGTERM);
  std::this_thread::sleep_for(after);
  const auto signalled = std::chrono::steady_clock::now();
  processes.kill(0, SIGTERM);
  const ProcessResult result = processes.wait_all(30s).at(0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  std::string flags;
  for (const auto& flag : more) flags += " " + flag;
  std::printf("SIGTERM %.0f s into worker:%d's start-up%s: exit %d after %.2f s\n",
              after.count() / 1000.0, task, flags.c_str(), result.exit_code, seconds);
  EXPECT_EQ(result.exit_code, 4) << result.output;
  EXPECT_LT(seconds, 2.0) << result.output;
  EXPECT_TRUE(testing::contains(result.output, "stopped by SIGTERM while")) << result.output;
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 5s));
}

TEST(StartupSignalTest, SigtermOneTwoAndThreeSecondsIntoAFixedJobsStartUpExitsFourAtOnce) {
  for (auto after : {1s, 2s, 3s}) expect_sigterm_ends_the_start_up({}, after);
}

TEST(StartupSignalTest, SigtermOneTwoAndThreeSecondsIntoAnElasticJobsStartUpExitsFourAtOnce) {
  for (auto after : {1s, 2s, 3s}) expect_sigterm_ends_the_start_up({"--min-workers", "1"}, after);
}

TEST(StartupSignalTest, SigtermWhileConnectingToAStoreThatIsNotThereExitsFourAtOnce) {
  expect_sigterm_ends_the_start_up({}, 2s, /*task=*/1);
}

// fit's own watcher is inside fit (BackupAndRestore); the start-up's waits watch for themselves.
TEST(StartupSignalTest, SigtermDuringTheStartUpOfAFitExitsFourAtOnce) {
  expect_sigterm_ends_the_start_up({"--loop", "fit"}, 2s);
}

// Issue 68, 12: a SIGTERM in the first instants (LibTorch's static initialization, before main,
// then the parsing and the output checks) met the default action: exit 143. dist-train now
// catches it from its preinit function, right after the dynamic loader (whose own half second
// here cannot be watched: docs/dist-train.md), and main hands it on: exit 4, "while loading".
// The signal is sent the moment the process is seen to catch it, so during the libraries'
// static initialization (about 0.5 s), then 100 ms later.
TEST(StartupSignalTest, SigtermFromTheFirstInstantItIsCaughtExitsFourNotTheDefaultAction) {
  for (auto later : {0ms, 100ms}) {
    WorkerProcesses processes;
    processes.start(DIST_TRAIN_BINARY,
                    {"--strategy", "default", "--train-examples", "256", "--max-steps", "2"}, {});
    const double caught = wait_until_it_catches(processes, 0, SIGTERM);
    std::this_thread::sleep_for(later);
    processes.kill(0, SIGTERM);
    const ProcessResult result = processes.wait_all(30s).at(0);
    std::printf("SIGTERM caught from %.3f s after the start, sent %lld ms later: exit %d\n", caught,
                static_cast<long long>(later.count()), result.exit_code);
    EXPECT_EQ(result.exit_code, 4) << result.output;
    EXPECT_TRUE(testing::contains(result.output, "stopped by SIGTERM while")) << result.output;
    if (later == 0ms) {  // main's hand-over of a signal from before main, not a later wait's
      EXPECT_TRUE(testing::contains(result.output, "stopped by SIGTERM while loading"))
          << result.output;
    }
    EXPECT_FALSE(testing::contains(result.output, "Epoch 1/")) << result.output;
  }
}

// A worker waiting to join a running elastic job (worker:0 holds its step boundary, so no
// commit answers the ticket) ends its wait on SIGTERM, and the job goes on without it.
TEST(StartupSignalTest, SigtermWhileWaitingToJoinAnElasticJobExitsFourAtOnce) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  const std::string go_on = dir.file("go-on");
  std::vector<std::string> args = testing::job_args("multi_worker", dir.file("w"), 40);
  args.insert(args.end(), {"--min-workers", "1"});
  const std::vector<std::vector<std::string>> faults{
      {"--hold-at-step", "20", "--until-file", go_on}, {"--kill-at-step", "10"}};
  WorkerProcesses processes;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> command = faults[static_cast<size_t>(i)];
    command.insert(command.end(), args.begin(), args.end());
    processes.start(KILLED_TRAIN_BINARY, command, {"TF_CONFIG=" + local_tf_config(ports, i)});
  }
  ASSERT_TRUE(processes.wait_for_output(0, "sizes 2 -> 1 (lost worker:1)", 120s));
  processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, 1)});
  ASSERT_TRUE(processes.wait_for_output(2, "asked to join", 60s));
  std::this_thread::sleep_for(1s);
  const auto signalled = std::chrono::steady_clock::now();
  processes.kill(2, SIGTERM);
  while (!testing::gone(processes.pid(2)) && std::chrono::steady_clock::now() - signalled < 30s)
    std::this_thread::sleep_for(10ms);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(120s);
  std::printf("SIGTERM to a worker waiting to join: exit %d after %.2f s\n", results[2].exit_code,
              seconds);
  EXPECT_EQ(results[2].exit_code, 4) << results[2].output;
  EXPECT_LT(seconds, 2.0) << results[2].output;
  EXPECT_TRUE(testing::contains(results[2].output, "while waiting to join the running elastic job"))
      << results[2].output;
  ASSERT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(testing::last_json(results[0].output)["steps"], 40) << results[0].output;
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 20s));
}

// Issue 55, 4: dist-launch --workers 2:3, worker:1 SIGKILLed the first time it reaches `point`
// (a key it writes in the job's store). The others saw it at once (they waited out the
// rendezvous timeout before, 120 s), dist-launch started it again, and the job ends with one
// device's weights.
void expect_a_start_up_loss_seen_at_once(const std::string& point, const TempDir& dir,
                                         const std::string& expected) {
  const std::string weights =
      dir.file("elastic-" + std::to_string(std::hash<std::string>{}(point)));
  std::vector<std::string> args{
      "--workers", "2:3",           "--",  KILLED_TRAIN_BINARY, "--kill-worker",
      "1",         "--kill-at-key", point, "--kill-once-file",  weights + ".killed"};
  for (const auto& flag : testing::job_args("multi_worker", weights, 20)) args.push_back(flag);
  // A wait for the lost worker would take the whole rendezvous timeout: make it unmistakable.
  args.insert(args.end(), {"--rendezvous-timeout", "300"});
  const auto start = std::chrono::steady_clock::now();
  WorkerProcesses launcher;  // bounded well below ctest's limit: a hang shows its output
  launcher.start(DIST_LAUNCH_BINARY, args, {});
  const ProcessResult result = launcher.wait_all(100s).at(0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::filesystem::exists(weights + ".killed")) << "worker:1 was never killed";
  EXPECT_TRUE(testing::contains(result.output, "[dist-launch] worker:1")) << result.output;
  EXPECT_EQ(launched_chief_json(result.output)["steps"], 20) << result.output;
  const double diff =
      testing::max_relative_difference(testing::weights_in(weights), testing::weights_in(expected));
  std::printf("worker:1 killed at %s: job done in %.1f s, %.3g from one device\n", point.c_str(),
              seconds, diff);
  EXPECT_LT(seconds, 90.0) << result.output;
  EXPECT_LT(diff, 1e-5);
}

TEST(StartupLossTest, AWorkerKilledAtEachPointOfAnElasticJobsStartUpIsSeenAtOnce) {
  TempDir dir;
  const std::string expected = testing::one_device_weights();
  for (const std::string point :
       {"generation/0/joined/worker:1", "generation/0/exchange/backend/worker:1",
        "generation/0/exchange/replicas_per_worker/worker:1", "elastic/running"})
    expect_a_start_up_loss_seen_at_once(point, dir, expected);
}

// Issue 55, 5: dist-launch started every worker again "to join the running job" and they began
// again from step 0, exiting 0. Without its store no worker can agree or join: the job stops,
// naming the store, exit 5 (not restarted).
TEST(ElasticStoreLossTest, KillingAnElasticJobsStoreHostStopsItNamingTheStore) {
  const auto ports = free_loopback_ports(2);
  std::vector<std::string> args = short_job(true);
  for (auto& arg : args)
    if (arg == "10") arg = "100000";  // --max-steps: still training when the store goes
  args.insert(args.end(), {"--epochs", "1000"});
  WorkerProcesses processes;
  for (int i = 0; i < 2; ++i)
    processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, i)});
  ASSERT_TRUE(processes.wait_for_output(0, "Global batch size", 60s));
  std::this_thread::sleep_for(2s);
  const auto hosts = testing::store_hosts(ports[0]);
  ASSERT_EQ(hosts.size(), 1u);
  ::kill(hosts[0], SIGKILL);
  const auto results = processes.wait_all(60s);
  for (const auto& result : results) {
    EXPECT_EQ(result.exit_code, 5) << result.output;
    EXPECT_TRUE(testing::contains(
        result.output, "lost its rendezvous store at 127.0.0.1:" + std::to_string(ports[0])))
        << result.output;
    EXPECT_TRUE(testing::last_json(result.output).is_null()) << result.output;
  }
}

// Issue 55, 6: 0 and -1 were refused with "Value 0 not in range 0.000000 to 1797693134862..."
// (300 digits, and 0 is in that range).
// The first as a dist-train process, the others through dist-train's checks in this process
// (testing::dist_train_checks).
TEST(StartupFlagsTest, CountsBelowOneAreRefusedSayingTheyMustBeAtLeastOne) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--min-workers", "0"}, {"--commit-every", "0"}, {"--commit-every", "-1"}}) {
    const std::vector<std::string> args{"--strategy", "multi_worker", flag, value};
    const ProcessResult result = flag == "--min-workers" ? testing::run_dist_train_alone(args)
                                                         : testing::dist_train_checks(args);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_TRUE(testing::contains(result.output, flag + ": must be at least 1, got " + value))
        << result.output;
    EXPECT_FALSE(testing::contains(result.output, "1797693")) << result.output;
  }
}

// Issue 55, 7: it ran 15 s and failed with "Too many open files" (exit 1).
TEST(StartupFlagsTest, DistLaunchRefusesMoreWorkersThanItsOpenFilesAllowAtOnce) {
  const ProcessResult result =
      testing::launch_job({"--workers", "1:100000", "--", DIST_TRAIN_BINARY});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(testing::contains(result.output, "open files")) << result.output;
  EXPECT_TRUE(testing::contains(result.output, "(ulimit -n)")) << result.output;
  EXPECT_LT(result.seconds, 10.0) << result.output;
}

// Issue 55, 8: "The following arguments were not expected: --max-steps 3" blamed the worker's
// flags.
TEST(StartupFlagsTest, DistLaunchNamesAnEmptyHost) {
  for (const std::string hosts : {",,", "127.0.0.1,,127.0.0.1", "127.0.0.1,"}) {
    const ProcessResult result =
        testing::launch_job({"--hosts", hosts, "--", DIST_TRAIN_BINARY, "--max-steps", "3"});
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_TRUE(testing::contains(result.output, "--hosts '" + hosts + "': host "))
        << result.output;
    EXPECT_TRUE(testing::contains(result.output, " is empty")) << result.output;
    EXPECT_FALSE(testing::contains(result.output, "not expected")) << result.output;
  }
}

}  // namespace
}  // namespace dist
