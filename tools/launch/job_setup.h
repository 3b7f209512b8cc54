// What dist-launch was asked to run (its flags, checked), and the kinds of job it runs: a
// multi-worker job (workers_job.cc, on this machine or with --hosts) or a parameter-server job
// (ps_job.cc).
#pragma once

#include <string>
#include <vector>

namespace dist::launch {

// dist-train's exit code after stopping cleanly on SIGTERM/SIGINT (checkpoint saved).
constexpr int kStoppedResumable = 4;
// --restart-workers starts one worker again at most this often: one that fails as it starts
// must not loop forever.
constexpr int kMaxWorkerRestarts = 10;
// The first worker's port on each host under --hosts without --port-base or DIST_PORT_BASE:
// the default of the Slurm and MPI resolvers (docs/clusters.md).
constexpr int kDefaultPortBase = 8888;

struct JobSetup {
  std::vector<std::string> command;
  int workers = 2;
  // --workers MIN:MAX: an elastic job of MAX workers that goes on while MIN remain; 0: not one.
  int min_workers = 0;
  std::string workers_text = "2";  // --workers as given
  int replicas = 1;
  int grace_seconds = 10;
  std::string job_token;
  // DIST_JOB_ID of the workers is this and the restart's number: each launch, and each restart
  // of it, is a job of its own to the rendezvous store, while a worker an elastic job starts
  // again joins its own (job_id_from_environment, cluster_resolver.h).
  std::string job_id;
  int restart = 0;  // DIST_RESTART_COUNT of the workers
  int ps = 0;       // ps tasks; more than 0 makes a parameter-server job
  bool evaluator = false;
  int evaluator_seconds = 600;  // after a successful chief, before the evaluator gets SIGTERM
  bool restart_workers = false;
  // --hosts: worker i runs on hosts[i % hosts.size()], started through host_command ({host}
  // replaced by the host); empty: every worker on this machine, on free loopback ports.
  std::vector<std::string> hosts;
  std::string hosts_text;  // --hosts as given, split into `hosts` by apply_hosts
  std::string host_command = "ssh {host}";
  int port_base = 0;  // --port-base; 0: DIST_PORT_BASE, else kDefaultPortBase
  // --rendezvous: DIST_RENDEZVOUS of the workers ("etcd://h:p,.../prefix"); empty: theirs, the
  // built-in store unless the launcher's environment names one.
  std::string rendezvous;
};

struct JobResult {
  int exit_code = 0;
  bool signalled = false;  // the launcher was asked to stop: not to be restarted
};

// dist-train's exit codes that a restart cannot cure: bad flags (2), bad data (3), an elastic
// job that ended below its minimum (5).
inline bool worth_restarting(int exit_code) {
  return exit_code != 2 && exit_code != 3 && exit_code != 5;
}

// Runs a multi-worker job's workers until all have exited (the rules at the top of
// workers_job.cc).
JobResult run_workers_job(const JobSetup& setup);

// Runs a parameter-server job until the chief and then every other task have exited (the rules
// at the top of ps_job.cc). The result is the chief's exit code.
JobResult run_ps_job(const JobSetup& setup);

}  // namespace dist::launch
