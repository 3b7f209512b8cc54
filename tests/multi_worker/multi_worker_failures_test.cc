// MultiWorkerMirroredStrategy's failures with real worker processes on 127.0.0.1 (see
// worker_main.cc): unknown backends, a different model, a worker that never joins or is killed,
// and the store host, each named within its timeout; then TF_CONFIG's parsing. Training that
// succeeds: multi_worker_test.cc. Every test is bounded: workers that outlive it are killed.
#include <gtest/gtest.h>

#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "collective/backends_built.h"
#include "collective/factory.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"
#include "dist/distribute/multi_worker_mirrored_strategy.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::all_output;
using testing::WorkerProcesses;

TEST(MultiWorkerTest, AnUnknownCollectiveBackendIsNamedWithTheBackendsOfThisBuild) {
  MultiWorkerOptions options;
  options.cluster = parse_tf_config(local_tf_config(free_loopback_ports(1), 0));
  options.communication.backend = "carrier_pigeon";
  const std::string message =
      testing::message_of<InvalidArgument>([&] { MultiWorkerMirroredStrategy strategy(options); });
  EXPECT_NE(message.find("unknown collective backend 'carrier_pigeon': this build has " +
                         collective::built_backends()),
            std::string::npos)
      << message;
  EXPECT_NE(collective::built_backends().find("gloo"), std::string::npos);
  EXPECT_EQ(collective::built_backends().find("mpi") != std::string::npos, DIST_HAVE_MPI != 0);
}

// The MPI backend in a process that no MPI launcher started: refused, saying to use mpirun (in a
// build without it: refused, saying how to build it).
TEST(MultiWorkerTest, TheMpiBackendOutsideMpirunSaysToStartTheWorkersWithMpirun) {
  MultiWorkerOptions options;
  options.cluster = parse_tf_config(local_tf_config(free_loopback_ports(1), 0));
  options.communication.backend = "mpi";
  const std::string message =
      testing::message_of<std::exception>([&] { MultiWorkerMirroredStrategy strategy(options); });
  const std::string expected =
      DIST_HAVE_MPI ? "started by an MPI launcher (mpirun -np N" : "apt-get install libopenmpi-dev";
  EXPECT_NE(message.find(expected), std::string::npos) << message;
}

TEST(MultiWorkerTest, DifferentModelFailsEveryWorkerBeforeStep1NamingTheParameter) {
  WorkerProcesses processes;
  auto ports = free_loopback_ports(2);
  processes.start(DIST_TEST_WORKER_BINARY, {"model", "16"},
                  {"TF_CONFIG=" + local_tf_config(ports, 0), "DIST_TEST_TIMEOUT_MS=20000"});
  processes.start(DIST_TEST_WORKER_BINARY, {"model", "32"},
                  {"TF_CONFIG=" + local_tf_config(ports, 1), "DIST_TEST_TIMEOUT_MS=20000"});
  auto results = processes.wait_all(60s);
  for (const auto& r : results) {
    EXPECT_NE(r.exit_code, 0) << all_output(results);
    EXPECT_NE(r.output.find("model mismatch before step 1: worker:1"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("'dense1.weight' [32, 784]"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("model check passed"), std::string::npos) << r.output;
  }
}

TEST(MultiWorkerTest, WorkerThatNeverJoinsIsNamedWithinTheRendezvousTimeout) {
  WorkerProcesses processes;
  auto ports = free_loopback_ports(3);
  for (int i : {0, 1})  // worker:2 is never started
    processes.start(DIST_TEST_WORKER_BINARY, {"model", "16"},
                    {"TF_CONFIG=" + local_tf_config(ports, i), "DIST_TEST_TIMEOUT_MS=2000"});
  auto results = processes.wait_all(30s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << all_output(results);
    EXPECT_NE(r.output.find("worker:2 (127.0.0.1:" + std::to_string(ports[2]) + ") never joined"),
              std::string::npos)
        << r.output;
    EXPECT_LT(r.seconds, 15);
  }
}

// kill -9 of any worker, the chief (rank 0: worker:0 here) included, makes the others exit 1
// naming it, never abort: the store lives in dist-store-host, which then exits by itself.
class MultiWorkerKillTest : public ::testing::TestWithParam<size_t> {};

TEST_P(MultiWorkerKillTest, KilledWorkerMakesTheOthersFailNamingItWithinTheTimeout) {
  const size_t killed = GetParam();
  WorkerProcesses processes;
  auto ports = free_loopback_ports(3);
  for (int i = 0; i < 3; ++i)
    processes.start(DIST_TEST_WORKER_BINARY, {"train_forever"},
                    {"TF_CONFIG=" + local_tf_config(ports, i), "DIST_TEST_TIMEOUT_MS=10000"});
  ASSERT_TRUE(processes.wait_for_output(1, "step 5", 60s)) << "workers did not start training";
  processes.kill(killed, SIGKILL);
  auto results = processes.wait_all(40s);
  EXPECT_EQ(results[killed].exit_code, 128 + SIGKILL);
  const std::string lost = "lost worker: worker:" + std::to_string(killed) +
                           " (127.0.0.1:" + std::to_string(ports[killed]) + ")";
  for (size_t i = 0; i < 3; ++i) {
    if (i == killed) continue;
    EXPECT_EQ(results[i].exit_code, 1) << all_output(results);
    EXPECT_NE(results[i].output.find(lost), std::string::npos) << results[i].output;
  }
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 10s))
      << "dist-store-host still serves 127.0.0.1:" << ports[0] << " 10 s after the job ended";
}

INSTANTIATE_TEST_SUITE_P(MultiWorker, MultiWorkerKillTest, ::testing::Values(0, 1),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("Chief") : std::string("Worker1");
                         });

TEST(MultiWorkerTest, StoreHostRunsOutsideTheChiefAndExitsAfterANormalRun) {
  WorkerProcesses processes;
  auto ports = free_loopback_ports(2);
  for (int i = 0; i < 2; ++i)
    processes.start(DIST_TEST_WORKER_BINARY, {"collectives", "1"},
                    {"TF_CONFIG=" + local_tf_config(ports, i), "DIST_TEST_TIMEOUT_MS=20000"});
  auto results = processes.wait_all(60s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
  // It outlives its members by about 3 s (the heartbeat staleness it waits for).
  EXPECT_EQ(testing::store_hosts(ports[0]).size(), 1u) << "no dist-store-host for the job";
  EXPECT_EQ(all_output(results).find("warning: dist-store-host not found"), std::string::npos);
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 10s))
      << "dist-store-host still serves 127.0.0.1:" << ports[0] << " 10 s after the job ended";
}

TEST(MultiWorkerTest, JobOnTheAddressesOfAJobThatJustEndedWaitsForItsStoreHost) {
  auto ports = free_loopback_ports(2);
  for (int run = 0; run < 2; ++run) {
    WorkerProcesses processes;
    for (int i = 0; i < 2; ++i)
      processes.start(DIST_TEST_WORKER_BINARY, {"collectives", "1"},
                      {"TF_CONFIG=" + local_tf_config(ports, i), "DIST_TEST_TIMEOUT_MS=20000"});
    auto results = processes.wait_all(60s);
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << "run " << run << all_output(results);
  }
  EXPECT_TRUE(testing::wait_until_store_host_gone(ports[0], 10s));
}

TEST(MultiWorkerTest, DistStoreHostChiefHostsTheStoreInTheChief) {
  WorkerProcesses processes;
  auto ports = free_loopback_ports(2);
  for (int i = 0; i < 2; ++i)
    processes.start(DIST_TEST_WORKER_BINARY, {"collectives", "1"},
                    {"TF_CONFIG=" + local_tf_config(ports, i), "DIST_TEST_TIMEOUT_MS=20000",
                     "DIST_STORE_HOST=chief"});
  auto results = processes.wait_all(60s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << all_output(results);
  EXPECT_TRUE(testing::store_hosts(ports[0]).empty());
}

TEST(MultiWorkerTest, BadDistStoreHostIsNamed) {
  WorkerProcesses processes;
  auto ports = free_loopback_ports(1);
  processes.start(DIST_TEST_WORKER_BINARY, {"model", "16"},
                  {"TF_CONFIG=" + local_tf_config(ports, 0), "DIST_TEST_TIMEOUT_MS=2000",
                   "DIST_STORE_HOST=/nonexistent/dist-store-host"});
  auto results = processes.wait_all(30s);
  EXPECT_EQ(results[0].exit_code, 1) << results[0].output;
  EXPECT_NE(results[0].output.find("DIST_STORE_HOST=/nonexistent/dist-store-host is not an "
                                   "executable file"),
            std::string::npos)
      << results[0].output;
}

// Bad TF_CONFIG: each case fails fast (no socket opened) with the JSON path and value.
TEST(TFConfigTest, MalformedConfigsNameThePathAndValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "TF_CONFIG: (root): invalid JSON"},
      {R"({"task": {"type": "worker", "index": 0}})", "TF_CONFIG: cluster: missing"},
      {R"({"cluster": {"worker": ["a:1"]}})", "TF_CONFIG: task: missing"},
      {R"({"cluster": {"worker": ["a:1"], "boss": ["b:2"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG: cluster.boss: unknown task type 'boss'"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "driver", "index": 0}})",
       "TF_CONFIG: task.type: unknown task type 'driver'"},
      {R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}})",
       "TF_CONFIG: task.index: 2 is out of range: cluster.worker has 2 entries"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})",
       "TF_CONFIG: task.index: -1 is out of range"},
      {R"({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG: cluster.worker[1]: duplicate address 'a:1' (also at cluster.worker[0])"},
      {R"({"cluster": {"worker": ["a:70000"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG: cluster.worker[0]: port 70000 of 'a:70000' is outside 1..65535"},
      {R"({"cluster": {"worker": ["a:0"]}, "task": {"type": "worker", "index": 0}})",
       "port 0 of 'a:0' is outside 1..65535"},
      {R"({"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG: cluster.worker[0]: 'nohost' is not host:port"},
      {R"({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG: cluster.worker: is empty and there is no chief"},
      {R"({"cluster": {"chief": ["a:1", "b:2"], "worker": ["c:3"]}, "task": {"type": "chief", "index": 0}})",
       "TF_CONFIG: cluster.chief: has 2 entries; a cluster has at most one chief"},
      {R"({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG: cluster.worker: expected a list"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}})",
       "TF_CONFIG: task.index: missing or not an integer"},
      // Found by tests/fuzz: nlohmann::json reports a number too large for a double as
      // out_of_range, not parse_error, and it escaped as such.
      {"3e332", "TF_CONFIG: (root): invalid JSON"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1e400}})",
       "TF_CONFIG: (root): invalid JSON"},
  };
  for (const auto& [text, expected] : cases) {
    const auto start = std::chrono::steady_clock::now();
    try {
      parse_tf_config(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "for " << text << "\n got: " << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 100ms);
  }
}

TEST(TFConfigTest, ValidConfigGivesRanksAndStore) {
  auto config = parse_tf_config(
      R"({"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]},
          "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(config.task.name(), "worker:1");
  EXPECT_EQ(config.cluster.collective_rank(config.task), 2);
  EXPECT_EQ(config.cluster.collective_tasks().size(), 3u);
  EXPECT_EQ(config.cluster.store_address().to_string(), "h0:2222");
  EXPECT_THROW(config.cluster.collective_rank({"ps", 0}), InvalidArgument);
  MultiWorkerOptions zero_replicas;
  zero_replicas.cluster = config;
  zero_replicas.replicas_per_worker = 0;
  EXPECT_THROW(MultiWorkerMirroredStrategy{zero_replicas}, InvalidArgument);
}

}  // namespace
}  // namespace dist
