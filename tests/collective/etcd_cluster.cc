#include "collective/etcd_cluster.h"

#include <csignal>
#include <thread>

#include "collective/etcd/etcd_client.h"
#include "dist/core/error.h"
#include "dist/distribute/local_cluster.h"
#include "run_program.h"

namespace dist::testing {

using namespace std::chrono_literals;

EtcdCluster::EtcdCluster(int members, const EtcdClusterOptions& cluster_options)
    : options_(cluster_options), binary_(find_program("etcd")) {
  if (binary_.empty()) {
    why_ = "etcd is not installed (Debian: etcd-server; scripts/install-deps.sh --tests)";
    return;
  }
  if (options_.tls && find_program("openssl").empty()) {
    binary_.clear();
    why_ = "openssl is not installed (Debian: openssl), which makes the TLS cluster's certificates";
    return;
  }
  if (options_.tls) make_certificates();
  const std::vector<int> ports = free_loopback_ports(2 * members);
  for (int i = 0; i < members; ++i) {
    clients_.push_back({"127.0.0.1", ports[2 * i]});
    peer_ports_.push_back(ports[2 * i + 1]);
  }
  process_of_.resize(members);
  for (int i = 0; i < members; ++i) start(i, "new");
  collective::etcd::EtcdOptions options;
  options.members = clients_;
  options.security = client_security();
  options.call_timeout = 30s;
  collective::etcd::EtcdClient client(options);
  try {
    client.put("etcd-cluster-test/up", "1");
  } catch (const Error& e) {
    throw Error(std::string("the test's etcd cluster did not come up: ") + e.what() + "\n" +
                output());
  }
}

std::vector<std::string> etcd_member_arguments(const EtcdMember& member) {
  std::vector<std::string> arguments{
      "--name", member.name, "--data-dir", member.data_dir, "--listen-peer-urls", member.peer_url,
      "--initial-advertise-peer-urls", member.peer_url, "--listen-client-urls", member.client_url,
      "--advertise-client-urls", member.client_url, "--initial-cluster", member.initial_cluster,
      "--initial-cluster-state", member.state,
      // zap: etcd 3.4 writes --log-outputs only with it
      "--logger", "zap", "--log-outputs", member.log};
  if (!member.cluster_token.empty())
    arguments.insert(arguments.end(), {"--initial-cluster-token", member.cluster_token});
  return arguments;
}

void EtcdCluster::start(int i, const std::string& state) {
  std::string cluster;
  for (size_t m = 0; m < peer_ports_.size(); ++m)
    cluster += (m ? "," : "") + ("m" + std::to_string(m)) +
               "=http://127.0.0.1:" + std::to_string(peer_ports_[m]);
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports_[i]);
  const std::string client = scheme() + clients_[i].to_string();
  const std::string name = "m" + std::to_string(i);
  std::vector<std::string> security;
  if (options_.tls)
    security = {
        "--cert-file",        dir_.file("server.pem"), "--key-file", dir_.file("server.key"),
        "--client-cert-auth", "--trusted-ca-file",     ca_file()};
  if (options_.auth_token_ttl_seconds > 0)
    security.insert(security.end(),
                    {"--auth-token-ttl", std::to_string(options_.auth_token_ttl_seconds)});
  std::vector<std::string> arguments =
      etcd_member_arguments({name, dir_.file(name), dir_.file(name + ".log"), peer, client, cluster,
                             state, "dist-test-" + std::to_string(peer_ports_[0])});
  arguments.insert(arguments.end(), security.begin(), security.end());
  process_of_[i] = processes_.size();
  processes_.start(binary_, arguments, {});
}

void EtcdCluster::openssl(const std::vector<std::string>& args) {
  const ProcessResult result = run_program(find_program("openssl"), args, 20s);
  if (result.exit_code != 0)
    throw Error("openssl " + args.at(0) + " failed making the test's etcd certificates (exit " +
                std::to_string(result.exit_code) + "):\n" + result.output);
}

// A CA; a server certificate for 127.0.0.1 (the members' client URLs) and a client certificate,
// both signed by it; and another CA that signed neither. P-256 keys: made in milliseconds.
void EtcdCluster::make_certificates() {
  const std::vector<std::string> new_key = {"-newkey", "ec", "-pkeyopt",
                                            "ec_paramgen_curve:prime256v1", "-nodes"};
  for (const std::string ca : {"ca", "other-ca"}) {
    std::vector<std::string> args = {"req",     "-x509",
                                     "-days",   "2",
                                     "-subj",   "/CN=dist-test-" + ca,
                                     "-keyout", dir_.file(ca + ".key"),
                                     "-out",    dir_.file(ca + ".pem"),
                                     "-addext", "basicConstraints=critical,CA:TRUE",
                                     "-addext", "keyUsage=critical,keyCertSign,cRLSign"};
    args.insert(args.begin() + 2, new_key.begin(), new_key.end());
    openssl(args);
  }
  write_file(dir_.file("server.ext"),
             "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  // The client's CN names no etcd user: with --client-cert-auth, etcd would take it as one.
  write_file(dir_.file("client.ext"), "extendedKeyUsage=clientAuth\n");
  for (const std::string who : {"server", "client"}) {
    std::vector<std::string> request = {"req",
                                        "-subj",
                                        "/CN=dist-test-" + who,
                                        "-keyout",
                                        dir_.file(who + ".key"),
                                        "-out",
                                        dir_.file(who + ".csr")};
    request.insert(request.begin() + 1, new_key.begin(), new_key.end());
    openssl(request);
    openssl({"x509", "-req", "-days", "2", "-in", dir_.file(who + ".csr"), "-CA", ca_file(),
             "-CAkey", dir_.file("ca.key"), "-CAcreateserial", "-CAserial", dir_.file("ca.srl"),
             "-extfile", dir_.file(who + ".ext"), "-out", dir_.file(who + ".pem")});
  }
}

collective::etcd::EtcdSecurity EtcdCluster::client_security() const {
  collective::etcd::EtcdSecurity security;
  if (!options_.tls) return security;
  security.ca_file = ca_file();
  security.cert_file = client_cert_file();
  security.key_file = client_key_file();
  return security;
}

ProcessResult EtcdCluster::etcdctl(const std::vector<std::string>& args) const {
  std::string endpoints;
  for (const HostPort& client : clients_)
    endpoints += (endpoints.empty() ? "" : ",") + scheme() + client.to_string();
  std::vector<std::string> all = {"--endpoints", endpoints,           "--dial-timeout",
                                  "5s",          "--command-timeout", "10s"};
  if (options_.tls)
    all.insert(all.end(),
               {"--cacert", ca_file(), "--cert", client_cert_file(), "--key", client_key_file()});
  all.insert(all.end(), args.begin(), args.end());
  WorkerProcesses process;
  process.start(find_program("etcdctl"), all, {"ETCDCTL_API=3"});
  return process.wait_all(20s).at(0);
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
