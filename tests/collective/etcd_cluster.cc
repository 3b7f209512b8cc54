#include "collective/etcd_cluster.h"

#include <csignal>
#include <thread>

#include "collective/etcd/etcd_client.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"

namespace dist::testing {

using namespace std::chrono_literals;

EtcdCluster::EtcdCluster(int members) : binary_(find_program("etcd")) {
  if (binary_.empty()) {
    why_ = "etcd is not installed (Debian: etcd-server; scripts/install-deps.sh --tests)";
    return;
  }
  const std::vector<int> ports = free_loopback_ports(2 * members);
  for (int i = 0; i < members; ++i) {
    clients_.push_back({"127.0.0.1", ports[2 * i]});
    peer_ports_.push_back(ports[2 * i + 1]);
  }
  process_of_.resize(members);
  for (int i = 0; i < members; ++i) start(i, "new");
  collective::etcd::EtcdOptions options;
  options.members = clients_;
  options.call_timeout = 30s;
  collective::etcd::EtcdClient client(options);
  try {
    client.put("etcd-cluster-test/up", "1");
  } catch (const Error& e) {
    throw Error(std::string("the test's etcd cluster did not come up: ") + e.what() + "\n" +
                output());
  }
}

void EtcdCluster::start(int i, const std::string& state) {
  std::string cluster;
  for (size_t m = 0; m < peer_ports_.size(); ++m)
    cluster += (m ? "," : "") + ("m" + std::to_string(m)) +
               "=http://127.0.0.1:" + std::to_string(peer_ports_[m]);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports_[i]);
  const std::string client = "http://" + clients_[i].to_string();
  const std::string name = "m" + std::to_string(i);
  process_of_[i] = processes_.size();
  processes_.start(binary_,
                   {"--name",
                    name,
                    "--data-dir",
                    dir_.file(name),
                    "--listen-peer-urls",
                    peer,
                    "--initial-advertise-peer-urls",
                    peer,
                    "--listen-client-urls",
                    client,
                    "--advertise-client-urls",
                    client,
                    "--initial-cluster",
                    cluster,
                    "--initial-cluster-state",
                    state,
                    "--initial-cluster-token",
                    "dist-test-" + std::to_string(peer_ports_[0]),
                    "--logger",
                    "zap",
                    "--log-outputs",
                    dir_.file(name + ".log")},
                   {});
}

void EtcdCluster::kill(int i) { processes_.kill(process_of_.at(i), SIGKILL); }

void EtcdCluster::restart(int i) { start(i, "existing"); }

std::string EtcdCluster::output() {
  std::string text;
  for (size_t m = 0; m < clients_.size(); ++m) {
    const std::string log = dir_.file("m" + std::to_string(m) + ".log");
    std::string lines;
    try {
      lines = read_file(log);
    } catch (const std::exception&) {
      lines = "(no log)\n";
    }
    // The last lines say why a member stopped or could not start.
    if (lines.size() > 4000) lines = "..." + lines.substr(lines.size() - 4000);
    text += "--- etcd member m" + std::to_string(m) + "\n" + lines;
  }
  return text;
}

}  // namespace dist::testing
