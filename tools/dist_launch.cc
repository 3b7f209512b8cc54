// dist-launch: starts a multi-worker job on this machine, for trying it out and for tests.
//
//   dist-launch --workers 2 [--replicas-per-worker 2] -- dist-train --strategy multi_worker
//
// Picks free loopback ports, starts one process per worker with TF_CONFIG naming its task
// (and DIST_REPLICAS_PER_WORKER), prefixes every line they print with the task name, stops
// all of them as soon as one fails (SIGTERM, then SIGKILL after a grace period).
//
// Signals: SIGINT and SIGTERM to the launcher are passed on to the workers; SIGHUP (its
// terminal closed) is passed on as SIGTERM, which dist-train handles by saving a checkpoint.
// If the launcher itself is killed (SIGKILL), the kernel sends each worker SIGTERM
// (PR_SET_PDEATHSIG): no worker outlives it.
//
// Exit code: 0 when every worker succeeded; the first failing worker's code; after a signal,
// 4 ("stopped, resumable": what dist-train returns when it stopped cleanly on a signal) if
// every worker exited with 0 or 4, else the first other code.
//
// Restarts (--max-restarts K, as torchrun's elastic agent): when a worker fails, all are
// stopped and the job starts again on fresh ports, at most K times; dist-train resumes from the
// latest checkpoint in its --checkpoint-dir. Exit codes 2 and 3 (bad flags, bad data) are not
// restarted. The workers see DIST_RESTART_COUNT (0 on the first run).
//
// Job token: every worker gets DIST_JOB_TOKEN, 32 random bytes as hex (or the launcher's own
// DIST_JOB_TOKEN), which the rendezvous store demands before it lets a connection in
// (SECURITY.md).
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distribute/local_cluster.h"

namespace {

struct Worker {
  std::string name;
  pid_t pid = -1;
  int output = -1;  // read end of the worker's stdout+stderr pipe
  std::string partial_line;
  bool exited = false;
  int exit_code = 0;
};

volatile sig_atomic_t forwarded_signal = 0;
void on_signal(int signal) { forwarded_signal = signal; }

// dist-train's exit code after stopping cleanly on SIGTERM/SIGINT (checkpoint saved).
constexpr int kStoppedResumable = 4;

Worker start(const std::vector<std::string>& command, const std::string& config, int index,
             const std::vector<std::string>& env) {
  const pid_t launcher = getpid();
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  Worker worker;
  worker.name = "worker:" + std::to_string(index);
  worker.pid = fork();
  if (worker.pid < 0) throw std::runtime_error("fork failed");
  if (worker.pid == 0) {
    setpgid(0, 0);  // its own process group, so stopping it stops its children too
    // Dies with the launcher, even a SIGKILLed one; SIGTERM lets dist-train save first. The
    // launcher may have died before prctl took effect: then stop here.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(128 + SIGTERM);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    setenv("TF_CONFIG", config.c_str(), 1);
    for (const auto& entry : env) putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::cerr << "dist-launch: cannot run " << command[0] << ": " << strerror(errno) << std::endl;
    _exit(127);
  }
  close(pipe_fds[1]);
  worker.output = pipe_fds[0];
  return worker;
}

void print_lines(Worker& worker, const char* data, size_t size, bool flush) {
  worker.partial_line.append(data, size);
  size_t start = 0, end;
  while ((end = worker.partial_line.find('\n', start)) != std::string::npos) {
    std::cout << "[" << worker.name << "] " << worker.partial_line.substr(start, end - start)
              << "\n";
    start = end + 1;
  }
  worker.partial_line.erase(0, start);
  if (flush && !worker.partial_line.empty()) {
    std::cout << "[" << worker.name << "] " << worker.partial_line << "\n";
    worker.partial_line.clear();
  }
  std::cout.flush();
}

void signal_all(std::vector<Worker>& workers, int signal) {
  for (auto& w : workers)
    if (!w.exited) kill(-w.pid, signal);
}

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

struct JobSetup {
  std::vector<std::string> command;
  int workers = 2;
  int replicas = 1;
  int grace_seconds = 10;
  std::string job_token;
  int restart = 0;  // DIST_RESTART_COUNT of the workers
};

struct JobResult {
  int exit_code = 0;
  bool signalled = false;  // the launcher was asked to stop: not to be restarted
};

// Runs the job's workers until all have exited: the exit code rules of the top comment.
JobResult run_job(const JobSetup& setup) {
  std::vector<Worker> workers;
  try {
    auto ports = dist::free_loopback_ports(setup.workers);
    const std::vector<std::string> env = {
        "DIST_REPLICAS_PER_WORKER=" + std::to_string(setup.replicas),
        "DIST_JOB_TOKEN=" + setup.job_token, "DIST_RESTART_COUNT=" + std::to_string(setup.restart)};
    for (int i = 0; i < setup.workers; ++i)
      workers.push_back(start(setup.command, dist::local_tf_config(ports, i), i, env));
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    signal_all(workers, SIGKILL);
    return {1, false};
  }

  int result = 0;
  std::string failed;
  bool stopping = false;
  bool signalled = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  size_t running = workers.size();
  while (running > 0) {
    if (forwarded_signal != 0 && !stopping) {
      stopping = signalled = true;
      std::cout << "[dist-launch] " << strsignal(forwarded_signal)
                << ": stopping the workers (they save a checkpoint if they have one)" << std::endl;
      signal_all(workers, forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal));
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(setup.grace_seconds);
    }
    std::vector<pollfd> fds;
    std::vector<Worker*> readable;  // the worker behind each entry of fds
    for (auto& w : workers) {
      if (w.output < 0) continue;
      fds.push_back({w.output, POLLIN, 0});
      readable.push_back(&w);
    }
    if (!fds.empty())
      poll(fds.data(), fds.size(), 100);
    else
      usleep(100 * 1000);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Worker& w = *readable[i];
      char buffer[4096];
      ssize_t n = read(w.output, buffer, sizeof(buffer));
      if (n > 0) {
        print_lines(w, buffer, static_cast<size_t>(n), false);
      } else {
        print_lines(w, "", 0, true);
        close(w.output);
        w.output = -1;
      }
    }
    for (auto& w : workers) {
      if (w.exited) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.exited = true;
      --running;
      w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (signalled) {
        // Stopped on request: 4 unless a worker failed at it (0 if all had finished anyway).
        if (w.exit_code == kStoppedResumable && result == 0) {
          result = kStoppedResumable;
        } else if (w.exit_code != 0 && w.exit_code != kStoppedResumable &&
                   (result == 0 || result == kStoppedResumable)) {
          result = w.exit_code;
          failed = w.name;
        }
      } else if (w.exit_code != 0 && !stopping) {
        stopping = true;
        result = w.exit_code;
        failed = w.name;
        std::cout << "[dist-launch] " << w.name << " exited with code " << w.exit_code
                  << "; stopping the other workers" << std::endl;
        signal_all(workers, SIGTERM);
        stop_deadline =
            std::chrono::steady_clock::now() + std::chrono::seconds(setup.grace_seconds);
      }
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) signal_all(workers, SIGKILL);
  }
  for (auto& w : workers) {  // what the workers printed last
    if (w.output < 0) continue;
    char buffer[4096];
    ssize_t n;
    while ((n = read(w.output, buffer, sizeof(buffer))) > 0)
      print_lines(w, buffer, static_cast<size_t>(n), false);
    print_lines(w, "", 0, true);
    close(w.output);
  }
  if (!failed.empty())
    std::cerr << "dist-launch: " << failed << " failed with exit code " << result << std::endl;
  return {result, signalled};
}

// dist-train's exit codes that a restart cannot cure: bad flags (2) and bad data (3).
bool worth_restarting(int exit_code) { return exit_code != 2 && exit_code != 3; }

}  // namespace

int main(int argc, char** argv) {
  JobSetup setup;
  int max_restarts = 0;
  CLI::App app{"dist-launch: run a multi-worker job as local processes"};
  app.add_option("--workers", setup.workers, "worker processes")->capture_default_str();
  app.add_option("--replicas-per-worker", setup.replicas, "replicas in each worker")
      ->capture_default_str();
  app.add_option("--grace-seconds", setup.grace_seconds,
                 "after a failure, SIGKILL workers still running after this long")
      ->capture_default_str();
  app.add_option("--max-restarts", max_restarts,
                 "when a worker fails, stop all and start the job again this many times at most "
                 "(dist-train resumes from the latest checkpoint in its --checkpoint-dir)")
      ->capture_default_str();
  app.add_option("command", setup.command, "the worker command, after --")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (setup.workers < 1 || setup.replicas < 1) {
    std::cerr << "dist-launch: --workers and --replicas-per-worker must be at least 1" << std::endl;
    return 2;
  }
  if (max_restarts < 0) {
    std::cerr << "dist-launch: --max-restarts must be 0 or more, got " << max_restarts << std::endl;
    return 2;
  }

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  signal(SIGPIPE, SIG_IGN);  // a closed terminal must not kill the launcher before its workers
  try {
    // One token for the whole job, restarts included: the workers of a restart are the same job.
    if (const char* given = std::getenv("DIST_JOB_TOKEN"); given && *given)
      setup.job_token = given;
    else
      setup.job_token = new_job_token();
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    return 1;
  }
  unsetenv("DIST_JOB_TOKEN_FILE");  // the workers get the token itself
  while (true) {
    const JobResult job = run_job(setup);
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
