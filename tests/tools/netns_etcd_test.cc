// An elastic job whose state is in etcd, across three hosts (network namespaces on one bridge,
// scripts/netns-cluster.sh), each host running an etcd member and a worker (issue 71): worker:0's
// process and host 0's etcd member are SIGKILLed together mid-epoch. Nothing of the job was in
// them: the two other workers resize to two through the two etcd members left, admit worker:0
// started again on host 0, end exit 0 and at one device's weights.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "collective/etcd_cluster.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/elastic_jobs.h"
#include "tools/netns_cluster.h"
#include "tools/train_runs.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using testing::kNetnsScript;
using testing::NetnsCluster;
using testing::TempDir;
using testing::WorkerProcesses;

// "a:2379,b:2379,c:2379": the etcd members' client addresses, one per host.
std::string etcd_members_of(const NetnsCluster& cluster) {
  std::string members;
  for (const auto& address : cluster.addresses())
    members += (members.empty() ? "" : ",") + address + ":2379";
  return members;
}

// Starts an etcd member on each host of `cluster` (data under `dir`) and waits up to 60 s until
// the cluster takes a write, asked from host 0 (this machine's own namespace has no route to
// the bridge). Why not, or "".
std::string start_etcd_on_hosts(const NetnsCluster& cluster, const TempDir& dir,
                                WorkerProcesses& members) {
  const std::string etcd = testing::find_program("etcd");
  const auto& hosts = cluster.addresses();
  std::string initial;
  for (size_t i = 0; i < hosts.size(); ++i)
    initial += (i ? "," : "") + ("m" + std::to_string(i)) + "=http://" + hosts[i] + ":2380";
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string name = "m" + std::to_string(i);
    const std::string peer = "http://" + hosts[i] + ":2380";
    const std::string client = "http://" + hosts[i] + ":2379";
    std::vector<std::string> line{"exec", hosts[i], etcd};
    const auto member = testing::etcd_member_arguments(
        {name, dir.file(name), dir.file(name + ".log"), peer, client, initial, "new", ""});
    line.insert(line.end(), member.begin(), member.end());
    members.start(kNetnsScript, line, {});
  }
  const std::string put = kNetnsScript + " exec " + hosts[0] +
                          " env ETCDCTL_API=3 etcdctl --dial-timeout 2s --command-timeout 3s "
                          "--endpoints " +
                          etcd_members_of(cluster) + " put /probe up";
  std::string last;
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       std::chrono::steady_clock::now() < until;) {
    const auto [code, output] = testing::run_logged(put, 10);
    if (code == 0) return "";
    last = output;
    std::this_thread::sleep_for(300ms);
  }
  std::string logs;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const std::string log =
        testing::run_logged("tail -n 3 " + dir.file("m" + std::to_string(i) + ".log"), 5).second;
    logs += "--- m" + std::to_string(i) + "\n" + log;
  }
  return "etcd did not take a write within 60 s: " + last + logs;
}

// TF_CONFIG of worker `index` of one worker per host, each on port 7100.
std::string tf_config_on_hosts(const NetnsCluster& cluster, int index) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& address : cluster.addresses()) workers.push_back(address + ":7100");
  return nlohmann::json{{"cluster", {{"worker", workers}}},
                        {"task", {{"type", "worker"}, {"index", index}}}}
      .dump();
}

TEST(NetnsEtcdTest, AnElasticJobLosesWorker0AndItsHostsEtcdMemberAndTakesWorker0Back) {
  if (testing::find_program("etcd").empty()) GTEST_SKIP() << "etcd is not installed (etcd-server)";
  MAKE_CLUSTER(cluster, 3);
  TempDir dir;
  WorkerProcesses etcd;
  const std::string etcd_down = start_etcd_on_hosts(cluster, dir, etcd);
  ASSERT_EQ(etcd_down, "");
  const std::string weights = dir.file("elastic.safetensors");
  const std::string never = dir.file("never");
  const std::string go_on = dir.file("joiner-asked");
  const auto args = testing::elastic_args(weights, 150, 2);
  const std::string rendezvous =
      "DIST_RENDEZVOUS=etcd://" + etcd_members_of(cluster) + "/dist/netns/";
  const std::vector<std::vector<std::string>> faults{
      {"--print-steps", "--hold-at-step", "50", "--until-file", never},
      {"--hold-at-step", "100", "--until-file", go_on},
      {}};
  WorkerProcesses workers;
  auto start_worker = [&](int i, const std::vector<std::string>& fault) {
    std::vector<std::string> line{"exec", cluster.addresses()[static_cast<size_t>(i)],
                                  fault.empty() ? DIST_TRAIN_BINARY : KILLED_TRAIN_BINARY};
    line = testing::with(testing::with(line, fault), args);
    workers.start(kNetnsScript, line, {"TF_CONFIG=" + tf_config_on_hosts(cluster, i), rendezvous});
  };
  for (int i = 0; i < 3; ++i) start_worker(i, faults[static_cast<size_t>(i)]);
  ASSERT_TRUE(workers.wait_for_output(0, "killed_train: step 50 done", 180s));
  workers.kill(0, SIGKILL);
  etcd.kill(0, SIGKILL);
  ASSERT_TRUE(workers.wait_for_output(1, "sizes 3 -> 2 (lost worker:0)", 120s));
  start_worker(0, {});
  ASSERT_TRUE(workers.wait_for_output(3, "asked to join", 120s));
  testing::write_file(go_on, "");
  const auto results = workers.wait_all(240s);
  EXPECT_EQ(results[0].exit_code, 128 + 9);
  for (size_t i : {1, 2, 3}) ASSERT_EQ(results[i].exit_code, 0) << results[i].output;
  const std::string& chief = results[3].output;
  EXPECT_EQ(testing::last_json(chief)["worker_sizes"], nlohmann::json({3, 2, 3})) << chief;
  const std::string& survivor = results[1].output;
  const auto resize = survivor.find("sizes 3 -> 2");
  const double diff = testing::difference_from_one_device(weights, 150);
  std::printf(
      "3 hosts on etcd, worker:0 and its host's etcd member lost: %.3g from one device\n"
      "%s\n",
      diff, survivor.substr(resize, survivor.find('\n', resize) - resize).c_str());
  EXPECT_LT(diff, 1e-5);
  for (size_t i = 1; i < 3; ++i) etcd.kill(i, SIGKILL);
  etcd.wait_all(30s);
  EXPECT_EQ(cluster.pids(), "") << "processes left on the hosts";
}

}  // namespace
}  // namespace dist
