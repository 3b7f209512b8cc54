// dist-train jobs that meet in etcd (--rendezvous etcd://..., issue 71): a real three-member etcd
// cluster on loopback (tests/collective/etcd_cluster.h) and real worker processes. Nothing of
// the job lives in a worker: an elastic job loses worker:0 together with an etcd member, goes on
// with two workers, takes worker:0 back and ends at the weights of one device; one etcd member
// lost while a job forms and another while it trains change nothing; a quorum lost stops the
// job naming its last commit.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "collective/etcd/etcd_client.h"
#include "collective/etcd_cluster.h"
#include "tools/elastic_jobs.h"
#include "tools/train_runs.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::EtcdCluster;
using testing::ProcessResult;
using testing::TempDir;
using testing::with;
using testing::WorkerProcesses;

std::string etcd_url(const EtcdCluster& cluster, const std::string& prefix) {
  std::string url = "etcd://";
  for (size_t i = 0; i < cluster.clients().size(); ++i)
    url += (i ? "," : "") + cluster.clients()[i].to_string();
  return url + prefix;
}

// Waits (up to 30 s) until member `i` alone answers a linearizable read: it rejoined the
// cluster and follows its leader, so that another member may be lost now.
bool member_serves(const EtcdCluster& cluster, int i) {
  collective::etcd::EtcdOptions options;
  options.members = {cluster.clients().at(static_cast<size_t>(i))};
  options.call_timeout = 2s;
  collective::etcd::EtcdClient client(options);
  for (auto until = std::chrono::steady_clock::now() + 30s;
       std::chrono::steady_clock::now() < until;) {
    try {
      client.get("/probe");
      return true;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(200ms);
    }
  }
  return false;
}

class EtcdJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!etcd_.available()) GTEST_SKIP() << etcd_.why();
  }
  EtcdCluster etcd_{3};
};

// A fixed job of two workers: etcd member 2 is killed before the workers start (the job forms
// with two members of three), started again once the job trains, and member 0 is killed at
// step 40 of 100. The job never notices: both workers end with exit 0, at one device's weights.
TEST_F(EtcdJobTest, OneMemberLostWhileTheJobFormsAndAnotherWhileItTrainsChangeNothing) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  const std::string weights = dir.file("w.safetensors");
  const std::string go_on = dir.file("go-on");
  const auto args = with(testing::small_job("multi_worker", weights, 100, "sgd"),
                         {"--rendezvous", etcd_url(etcd_, "/dist/fixed/")});
  etcd_.kill(2);
  WorkerProcesses processes;
  testing::start_workers(processes, ports, args,
                         {{"--print-steps", "--hold-at-step", "40", "--until-file", go_on}});
  ASSERT_TRUE(processes.wait_for_output(0, "killed_train: step 40 done", 120s));
  etcd_.restart(2);
  ASSERT_TRUE(member_serves(etcd_, 2)) << etcd_.output();
  etcd_.kill(0);
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(180s);
  for (const auto& result : results) ASSERT_EQ(result.exit_code, 0) << result.output;
  const double diff = testing::difference_from_one_device(weights, 100);
  std::printf("2 workers on etcd, a member lost forming and one training: %.3g from one device\n",
              diff);
  EXPECT_LT(diff, 1e-5);
}

// An elastic job of three workers: worker:0, the job's first chief, holds after step 50 (mid
// epoch) and is SIGKILLed there together with etcd member 0. The others resize to two, a new
// worker:0 asks to join while worker:1 holds after step 100, is admitted, and the job ends
// after 150 steps at one device's weights, sizes [3, 2, 3].
TEST_F(EtcdJobTest, AnElasticJobLosesWorker0AndItsEtcdMemberAndTakesWorker0Back) {
  TempDir dir;
  const auto ports = free_loopback_ports(3);
  const std::string weights = dir.file("elastic.safetensors");
  const std::string never = dir.file("never");
  const std::string go_on = dir.file("joiner-asked");
  const auto args =
      with(testing::elastic_args(weights, 150, 2), {"--rendezvous", etcd_url(etcd_, "/dist/el/")});
  WorkerProcesses processes;
  testing::start_workers(processes, ports, args,
                         {{"--print-steps", "--hold-at-step", "50", "--until-file", never},
                          {"--hold-at-step", "100", "--until-file", go_on}});
  ASSERT_TRUE(processes.wait_for_output(0, "killed_train: step 50 done", 120s));
  processes.kill(0, SIGKILL);
  etcd_.kill(0);
  ASSERT_TRUE(processes.wait_for_output(1, "sizes 3 -> 2 (lost worker:0)", 120s)) << etcd_.output();
  processes.start(DIST_TRAIN_BINARY, args, {"TF_CONFIG=" + local_tf_config(ports, 0)});
  ASSERT_TRUE(processes.wait_for_output(3, "asked to join", 60s));
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(240s);
  EXPECT_EQ(results[0].exit_code, 128 + 9);  // SIGKILL
  for (size_t i : {1, 2, 3}) ASSERT_EQ(results[i].exit_code, 0) << results[i].output;
  const std::string& chief = results[3].output;  // worker:0 again: the last generation's chief
  EXPECT_EQ(testing::last_json(chief)["worker_sizes"], nlohmann::json({3, 2, 3})) << chief;
  EXPECT_EQ(testing::last_json(chief)["steps"], 150);
  EXPECT_TRUE(testing::contains(results[1].output, "sizes 3 -> 2 (lost worker:0)"))
      << results[1].output;
  EXPECT_TRUE(testing::contains(chief, "sizes 2 -> 3 (joined worker:0)")) << chief;
  const double diff = testing::difference_from_one_device(weights, 150);
  const std::string& survivor = results[1].output;
  const auto resize = survivor.find("sizes 3 -> 2");
  std::printf("3 -> 2 -> 3 workers on etcd, worker:0 and an etcd member lost: %.3g\n%s\n", diff,
              survivor.substr(resize, survivor.find('\n', resize) - resize).c_str());
  EXPECT_LT(diff, 1e-5);
}

// Two etcd members of three lost while an elastic job trains: no survivor can agree on anything
// any more, so every worker stops within etcd's call timeout (10 s) and a step, naming the lost
// quorum and the last committed step. With etcd's members started again, the job started again
// takes its prefix back from the stopped one's keys, resumes from that step (checkpointed at
// every step) and ends at one device's weights.
TEST_F(EtcdJobTest, AQuorumLostStopsEveryWorkerNamingTheLastCommitAndTheJobResumesOnceItIsBack) {
  TempDir dir;
  const auto ports = free_loopback_ports(2);
  const std::string weights = dir.file("w.safetensors");
  const std::string go_on = dir.file("go-on");
  const auto args = with(testing::elastic_args(weights, 60, 1),
                         {"--rendezvous", etcd_url(etcd_, "/dist/quorum/"), "--checkpoint-dir",
                          dir.file("checkpoints"), "--checkpoint-every", "1"});
  WorkerProcesses processes;
  testing::start_workers(processes, ports, args,
                         {{"--print-steps", "--hold-at-step", "20", "--until-file", go_on}});
  ASSERT_TRUE(processes.wait_for_output(0, "killed_train: step 20 done", 120s));
  etcd_.kill(1);
  etcd_.kill(2);
  const auto lost = std::chrono::steady_clock::now();
  testing::write_file(go_on, "");
  const auto results = processes.wait_all(120s);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - lost).count();
  for (const auto& result : results) {
    EXPECT_EQ(result.exit_code, 5) << result.output;
    EXPECT_TRUE(testing::contains(result.output, "a quorum of its members is gone"))
        << result.output;
    EXPECT_TRUE(testing::contains(result.output, "the last committed step is")) << result.output;
  }
  // The step the stop names: with a checkpoint at every step, the one the job resumes from.
  const std::string& stop = results[0].output;
  const std::string named = "the last committed step is ";
  const auto at = stop.find(named);
  ASSERT_NE(at, std::string::npos) << stop;
  const int committed = std::stoi(stop.substr(at + named.size()));
  EXPECT_LT(took, 60);
  std::printf("quorum lost: every worker stopped within %.1f s\n", took);

  etcd_.restart(1);
  etcd_.restart(2);
  ASSERT_TRUE(member_serves(etcd_, 1)) << etcd_.output();
  WorkerProcesses again;
  testing::start_workers(again, ports, args, {});
  const auto resumed = again.wait_all(180s);
  for (const auto& result : resumed)
    ASSERT_EQ(result.exit_code, 0) << resumed[0].output << "\n---\n" << resumed[1].output;
  EXPECT_EQ(testing::last_json(resumed[0].output)["resumed_at_step"], committed)
      << resumed[0].output;
  const double diff = testing::difference_from_one_device(weights, 60);
  std::printf("resumed after the quorum came back: %.3g from one device\n", diff);
  EXPECT_LT(diff, 1e-5);
}

}  // namespace
}  // namespace dist
