// The intra-op threads a strategy gives a user's own program (one_device_strategy.h,
// MirroredOptions::threads_per_replica): the cores the process may run on, unless the user
// chose. Each case runs in a fresh process (this binary itself, started with
// DIST_THREAD_DEFAULTS_CHILD set to run ThreadDefaultsChild's case): LibTorch's thread count
// is process state that the tests before it in this process may have changed.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/distribute/mirrored_strategy.h"
#include "dist/distribute/one_device_strategy.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;

constexpr const char* kNotAChild =
    "runs only as the child process of ThreadDefaultsTest (DIST_THREAD_DEFAULTS_CHILD unset)";

// "key=value;key=value" -> map.
std::map<std::string, std::string> parse_spec(const std::string& text) {
  std::map<std::string, std::string> spec;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ';')) {
    const auto equals = item.find('=');
    if (equals != std::string::npos) spec[item.substr(0, equals)] = item.substr(equals + 1);
  }
  return spec;
}

int number(const std::map<std::string, std::string>& spec, const std::string& key) {
  const auto it = spec.find(key);
  return it == spec.end() ? 0 : std::stoi(it->second);
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// What a user's program does, as the spec says: set OMP_NUM_THREADS (omp=N), bind itself to `cpus`
// CPUs as a launcher would (cpus=N), call at::set_num_threads (user=N), make the strategy
// (strategy=one_device or mirrored, replicas=N, option=N for OneDeviceOptions::threads or
// threads_per_replica), then report the counts: "caller N" (the making thread), "replica R N"
// (inside run()), "later N" (a thread started afterwards), "allowed N".
TEST(ThreadDefaultsChild, ReportsTheThreadCounts) {
  const char* text = std::getenv("DIST_THREAD_DEFAULTS_CHILD");
  if (text == nullptr) GTEST_SKIP() << kNotAChild;
  const auto spec = parse_spec(text);
  // The environment this test gives, not the one the suite runs in.
  unsetenv("MKL_NUM_THREADS");
  if (spec.count("omp")) {
    setenv("OMP_NUM_THREADS", spec.at("omp").c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
  if (const int cpus = number(spec, "cpus"); cpus > 0) {
    cpu_set_t allowed, set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
    for (int c = 0, kept = 0; c < CPU_SETSIZE && kept < cpus; ++c)
      if (CPU_ISSET(c, &allowed)) CPU_SET(c, &set), ++kept;
    ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
  }
  if (const int user = number(spec, "user"); user > 0) at::set_num_threads(user);
  const int option = number(spec, "option");
  std::vector<int> replica_threads;
  auto report = [&](const Strategy& strategy) {
    const auto counts = strategy.run([] { return at::get_num_threads(); });
    replica_threads = counts.values();
  };
  if (spec.at("strategy") == "one_device") {
    OneDeviceOptions options;
    options.threads = option;
    report(OneDeviceStrategy(options));
  } else {
    MirroredOptions options;
    for (int r = 0; r < number(spec, "replicas"); ++r)
      options.devices.push_back("cpu:" + std::to_string(r));
    options.threads_per_replica = option;
    report(MirroredStrategy(options));
  }
  int later = 0;
  std::thread([&] { later = at::get_num_threads(); }).join();
  std::cout << "caller " << at::get_num_threads() << "\n";
  for (size_t r = 0; r < replica_threads.size(); ++r)
    std::cout << "replica " << r << " " << replica_threads[r] << "\n";
  std::cout << "later " << later << "\n"
            << "allowed " << affinity_cores() << "\n"
            << "libtorch_default " << at::intraop_default_num_threads() << std::endl;
}

struct Counts {
  int caller = -1;
  std::vector<int> replicas;
  int later = -1;
  int allowed = -1;
  int libtorch_default = -1;
};

// Runs the child with this spec (and extra environment) and reads its report.
Counts run_child(const std::string& spec) {
  testing::WorkerProcesses processes;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  processes.start(self, {"--gtest_color=no", "--gtest_filter=ThreadDefaultsChild.*"},
                  {"DIST_THREAD_DEFAULTS_CHILD=" + spec});
  const auto result = processes.wait_all(60s).at(0);
  Counts counts;
  EXPECT_EQ(result.exit_code, 0) << spec << ":\n" << result.output;
  EXPECT_TRUE(testing::contains(result.output, "[       OK ] ThreadDefaultsChild."))
      << result.output;
  std::istringstream lines(result.output);
  std::string word;
  while (lines >> word) {
    if (word == "caller") lines >> counts.caller;
    if (word == "later") lines >> counts.later;
    if (word == "allowed") lines >> counts.allowed;
    if (word == "libtorch_default") lines >> counts.libtorch_default;
    if (word == "replica") {
      size_t r = 0;
      int threads = 0;
      lines >> r >> threads;
      counts.replicas.push_back(threads);
    }
  }
  return counts;
}

TEST(ThreadDefaultsTest, OneDeviceStrategyGivesTheReplicaEveryAllowedCore) {
  const Counts counts = run_child("strategy=one_device");
  ASSERT_GE(counts.allowed, 1);
  EXPECT_EQ(counts.caller, counts.allowed) << "LibTorch's default: " << counts.libtorch_default;
  EXPECT_EQ(counts.replicas, std::vector<int>{counts.allowed});
  EXPECT_EQ(counts.later, counts.allowed) << "a thread started after the strategy";
}

// A launcher that bound the process to one CPU (srun --cpu-bind, taskset) gave it one core.
TEST(ThreadDefaultsTest, OneDeviceStrategyUsesOnlyTheCpusTheProcessIsBoundTo) {
  const Counts counts = run_child("strategy=one_device;cpus=1");
  EXPECT_EQ(counts.allowed, 1);
  EXPECT_EQ(counts.caller, 1);
  EXPECT_EQ(counts.replicas, std::vector<int>{1});
}

TEST(ThreadDefaultsTest, AUserWhoSetTheThreadsKeepsThem) {
  // at::set_num_threads before the strategy, with a count that is not LibTorch's default.
  Counts counts = run_child("strategy=one_device;user=3");
  EXPECT_EQ(counts.caller, 3);
  EXPECT_EQ(counts.replicas, std::vector<int>{3});
  // OMP_NUM_THREADS, even at LibTorch's default of one thread on some machines.
  counts = run_child("strategy=one_device;omp=1");
  EXPECT_EQ(counts.caller, 1);
  EXPECT_EQ(counts.replicas, std::vector<int>{1});
  // The option says it for certain, whatever was set before.
  counts = run_child("strategy=one_device;user=3;option=5");
  EXPECT_EQ(counts.caller, 5);
  EXPECT_EQ(counts.replicas, std::vector<int>{5});
}

TEST(ThreadDefaultsTest, MirroredStrategySplitsTheAllowedCoresAmongItsReplicas) {
  Counts counts = run_child("strategy=mirrored;replicas=2");
  ASSERT_GE(counts.allowed, 1);
  const int each = std::max(1, counts.allowed / 2);
  EXPECT_EQ(counts.replicas, (std::vector<int>{each, each}));
  EXPECT_EQ(counts.caller, 2 * each) << "the making thread: the replicas' cores together";
  // Bound to one CPU: one thread each.
  counts = run_child("strategy=mirrored;replicas=2;cpus=1");
  EXPECT_EQ(counts.replicas, (std::vector<int>{1, 1}));
  EXPECT_EQ(counts.caller, 2);
}

TEST(ThreadDefaultsTest, MirroredStrategyKeepsTheUsersChoices) {
  // threads_per_replica for the replicas; the user's own count for the making thread.
  const Counts counts = run_child("strategy=mirrored;replicas=2;option=3;user=7");
  EXPECT_EQ(counts.replicas, (std::vector<int>{3, 3}));
  EXPECT_EQ(counts.caller, 7);
}

}  // namespace
}  // namespace dist
