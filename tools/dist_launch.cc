// dist-launch: starts a multi-worker job on this machine, for trying it out and for tests, or
// on given hosts through ssh (or any command prefix).
//
//   dist-launch --workers 2 [--replicas-per-worker 2] -- dist-train --strategy multi_worker
//   dist-launch --hosts 10.0.0.1,10.0.0.2 [--host-command 'ssh {host}'] -- dist-train ...
//   dist-launch --workers 2 --ps 1 [--evaluator] [--restart-workers] -- my_ps_program ...
//
// Picks free loopback ports, starts one process per worker with TF_CONFIG naming its task
// (and DIST_REPLICAS_PER_WORKER), prefixes every line they print with the task name, stops
// all of them as soon as one fails (SIGTERM, then SIGKILL after a grace period). The rules of
// each kind of job are where it runs: a multi-worker job and its exit code in
// launch/workers_job.cc, a parameter-server job in launch/ps_job.cc, --hosts in
// launch/launches.cc.
//
// Signals: SIGINT and SIGTERM to the launcher are passed on to the workers; SIGHUP (its
// terminal closed) is passed on as SIGTERM, which dist-train handles by saving a checkpoint.
// If the launcher itself is killed (SIGKILL), the kernel sends each worker SIGTERM
// (PR_SET_PDEATHSIG): no worker outlives it.
//
// Restarts (--max-restarts K, as torchrun's elastic agent): when a worker fails, all are
// stopped and the job starts again on fresh ports (with --hosts the same ones), at most K times;
// dist-train resumes from the latest checkpoint in its --checkpoint-dir. Exit codes 2 and 3 (bad
// flags, bad data) are not restarted. The workers see DIST_RESTART_COUNT (0 on the first run).
//
// Job identity: every worker gets DIST_JOB_ID, new for each launch and each restart of it (or
// the launcher's own DIST_JOB_ID, with the restart's number), so that a job never takes the
// rendezvous store of another one on the same addresses for its own.
// Job token: every worker gets DIST_JOB_TOKEN, 32 random bytes as hex (or the launcher's own
// DIST_JOB_TOKEN), which the rendezvous store demands before it lets a connection in
// (SECURITY.md).
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "launch/flags.h"
#include "launch/job_setup.h"
#include "launch/task.h"

namespace dist::launch {
namespace {

// A random job token: 32 bytes from the kernel, as 64 hex digits.
std::string new_job_token() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[32];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes)))
    throw std::runtime_error("cannot read /dev/urandom for the job token");
  std::string token;
  const char* digits = "0123456789abcdef";
  for (unsigned char b : bytes) {
    token += digits[b >> 4];
    token += digits[b & 15];
  }
  return token;
}

// Runs the job, started again after a failure up to `max_restarts` times; the exit code.
int run_with_restarts(JobSetup& setup, int max_restarts) {
  while (true) {
    const JobResult job = setup.ps > 0 ? run_ps_job(setup) : run_workers_job(setup);
    if (job.exit_code == 0 || job.signalled || setup.restart >= max_restarts) return job.exit_code;
    if (!worth_restarting(job.exit_code)) {
      std::cout << "[dist-launch] not restarting: exit code " << job.exit_code
                << " means bad input, which a restart would meet again" << std::endl;
      return job.exit_code;
    }
    ++setup.restart;
    std::cout << "[dist-launch] restarting the job (restart " << setup.restart << " of "
              << max_restarts << "); the workers resume from their latest checkpoint" << std::endl;
  }
}

}  // namespace
}  // namespace dist::launch

int main(int argc, char** argv) {
  namespace launch = dist::launch;
  launch::JobSetup setup;
  int max_restarts = 0;
  CLI::App app{"dist-launch: run a multi-worker job as local processes, or on given hosts"};
  launch::add_flags(app, setup, max_restarts);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::string error = launch::parse_workers(setup);
  if (error.empty())
    error = launch::apply_hosts(setup, app.count("--hosts") > 0, app.count("--workers") > 0);
  if (error.empty()) error = launch::check_setup(setup, max_restarts);
  if (!error.empty()) {
    std::cerr << "dist-launch: " << error << std::endl;
    return 2;
  }

  signal(SIGINT, launch::on_signal);
  signal(SIGTERM, launch::on_signal);
  signal(SIGHUP, launch::on_signal);
  signal(SIGPIPE, SIG_IGN);  // a closed terminal must not kill the launcher before its workers
  try {
    // One token for the whole job, restarts included: the workers of a restart are the same job.
    if (const char* given = std::getenv("DIST_JOB_TOKEN"); given && *given)
      setup.job_token = given;
    else
      setup.job_token = launch::new_job_token();
    // A launch of its own: the launcher's own DIST_JOB_ID names the job, else a new one.
    if (const char* given = std::getenv("DIST_JOB_ID"); given && *given)
      setup.job_id = given;
    else
      setup.job_id = "dist-launch-" + launch::new_job_token().substr(0, 16);
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    return 1;
  }
  unsetenv("DIST_JOB_TOKEN_FILE");  // the workers get the token itself
  return launch::run_with_restarts(setup, max_restarts);
}
