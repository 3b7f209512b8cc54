// Across hosts (--hosts A,B,... [--host-command 'ssh {host}'] [--port-base P]): worker i runs on
// host i modulo the host count (list a host twice for two workers on it), started by
// --host-command with {host} replaced, whose last argument is a shell command line: it reads
// DIST_JOB_TOKEN from stdin (written by the launcher, so the token is on no command line),
// then `exec env TF_CONFIG=... DIST_REPLICAS_PER_WORKER=... COMMAND`. TF_CONFIG names each
// worker by its host's address and port P (DIST_PORT_BASE, else 8888) plus its number on that
// host: a port free on another host cannot be probed from here. Workers whose addresses name
// different hosts use the network, not shared memory (the same host is decided by address).
// The pid the launcher signals is the prefix's: with `ip netns exec` (scripts/netns-cluster.sh
// exec {host} sh -c) everything execs, so it is the worker's; with ssh it is ssh's, and a
// stopped ssh does not stop the remote worker (it fails when its peers go, within its
// --collective-timeout): docs/clusters.md.
#include "launches.h"

#include <map>
#include <sstream>

#include "dist/distribute/local_cluster.h"

namespace dist::launch {
namespace {

// The environment of every task but TF_CONFIG; the token last (host_launch leaves it out).
std::vector<std::string> job_env(const JobSetup& setup) {
  std::vector<std::string> env{"DIST_REPLICAS_PER_WORKER=" + std::to_string(setup.replicas),
                               "DIST_RESTART_COUNT=" + std::to_string(setup.restart)};
  if (setup.min_workers > 0) env.push_back("DIST_MIN_WORKERS=" + std::to_string(setup.min_workers));
  env.push_back("DIST_JOB_ID=" + setup.job_id + "." + std::to_string(setup.restart));
  if (!setup.rendezvous.empty()) env.push_back("DIST_RENDEZVOUS=" + setup.rendezvous);
  env.push_back("DIST_JOB_TOKEN=" + setup.job_token);
  return env;
}

// `word` for a POSIX shell: in single quotes, each ' as '\''.
std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A worker on `host` (--hosts), started as ssh would start it: the words of --host-command with
// {host} replaced, then one argument, a shell command line, which reads the job token from
// stdin (so it is on no command line and in no process list), then execs `env` with the rest
// of the environment and the command (so the remote pid is the worker's). Nothing of the
// launcher's environment is counted on: ssh passes none of it.
Launch host_launch(const JobSetup& setup, const std::string& host, const std::string& config) {
  Launch launch;
  std::istringstream words(setup.host_command);
  for (std::string word; words >> word;) {
    for (size_t at; (at = word.find("{host}")) != std::string::npos;) word.replace(at, 6, host);
    launch.argv.push_back(word);
  }
  std::string line = "read -r DIST_JOB_TOKEN && export DIST_JOB_TOKEN && exec env";
  std::vector<std::string> env = job_env(setup);
  env.pop_back();  // the token
  env.push_back("TF_CONFIG=" + config);
  for (const auto& entry : env) line += " " + shell_quote(entry);
  for (const auto& word : setup.command) line += " " + shell_quote(word);
  launch.argv.push_back(line);
  launch.feed_input = true;
  launch.input = setup.job_token + "\n";
  return launch;
}

}  // namespace

Launch local_launch(const JobSetup& setup, const std::string& config) {
  Launch launch;
  launch.argv = setup.command;
  launch.env = job_env(setup);
  launch.env.push_back("TF_CONFIG=" + config);
  return launch;
}

std::vector<Launch> worker_launches(const JobSetup& setup) {
  std::vector<std::string> addresses, hosts;
  if (setup.hosts.empty()) {
    for (int port : free_loopback_ports(setup.workers))
      addresses.push_back("127.0.0.1:" + std::to_string(port));
  } else {
    std::map<std::string, int> on_host;
    for (int i = 0; i < setup.workers; ++i) {
      hosts.push_back(setup.hosts[static_cast<size_t>(i) % setup.hosts.size()]);
      addresses.push_back(hosts.back() + ":" +
                          std::to_string(setup.port_base + on_host[hosts.back()]++));
    }
  }
  std::vector<Launch> launches;
  for (int i = 0; i < setup.workers; ++i) {
    const std::string config = workers_tf_config(addresses, i);
    launches.push_back(hosts.empty() ? local_launch(setup, config)
                                     : host_launch(setup, hosts[static_cast<size_t>(i)], config));
  }
  return launches;
}

}  // namespace dist::launch
