// The default thread count of a worker process: its share of the host's cores.
#include "distribute/strategies/worker_cores.h"

#include <gtest/gtest.h>

#include <thread>

namespace dist::detail {
namespace {

TEST(WorkerCoresTest, WorkersOnOneHostSplitItsCores) {
  EXPECT_EQ(default_threads_per_replica(1, 1, 2, 2), 2);  // one worker: every core
  EXPECT_EQ(default_threads_per_replica(1, 2, 2, 2), 1);  // dist-launch --workers 2 on 2 cores
  EXPECT_EQ(default_threads_per_replica(2, 1, 8, 8), 4);  // 2 replicas in one worker
  EXPECT_EQ(default_threads_per_replica(2, 2, 8, 8), 2);
  EXPECT_EQ(default_threads_per_replica(1, 3, 8, 8), 2);  // rounded down, not oversubscribed
}

TEST(WorkerCoresTest, NeverLessThanOneThread) {
  EXPECT_EQ(default_threads_per_replica(1, 4, 2, 2), 1);
  EXPECT_EQ(default_threads_per_replica(4, 1, 2, 2), 1);
  EXPECT_EQ(default_threads_per_replica(0, 0, 0, 0), 1);
}

// A launcher that bound the process (srun --cpu-bind, mpirun --bind-to) already gave it its
// share of the host: it is not divided again by the workers on the host.
TEST(WorkerCoresTest, AProcessBoundToSomeCoresUsesThem) {
  EXPECT_EQ(default_threads_per_replica(1, 4, 16, 4), 4);
  EXPECT_EQ(default_threads_per_replica(2, 4, 16, 4), 2);
  EXPECT_EQ(default_threads_per_replica(1, 2, 2, 1), 1);
  // Unreadable affinity (0): the host's cores, split among the workers.
  EXPECT_EQ(default_threads_per_replica(1, 2, 8, 0), 4);
}

TEST(WorkerCoresTest, CountsTheWorkersWhoseAddressNamesThisHost) {
  const std::string tf_config = R"({"cluster": {"chief": ["127.0.0.1:7000"],
                                    "worker": ["127.0.0.1:7001", "10.0.0.2:7000", "10.0.0.2:7001",
                                               "10.0.0.2:7002"],
                                    "ps": ["127.0.0.1:7100"]},
                                    "task": {"type": "worker", "index": 0}})";
  auto config = parse_tf_config(tf_config);
  EXPECT_EQ(workers_on_host(config), 2) << "the chief and worker 0; a ps is not a worker";
  config.task.index = 1;
  EXPECT_EQ(workers_on_host(config), 3);
}

TEST(WorkerCoresTest, ReadsThisProcesssAffinity) {
  const int allowed = allowed_cores();
  EXPECT_GE(allowed, 1);
  EXPECT_LE(allowed, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace dist::detail
