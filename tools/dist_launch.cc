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
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
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
             int replicas) {
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
    setenv("DIST_REPLICAS_PER_WORKER", std::to_string(replicas).c_str(), 1);
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

}  // namespace

int main(int argc, char** argv) {
  int workers_count = 2, replicas = 1, grace_seconds = 10;
  std::vector<std::string> command;
  CLI::App app{"dist-launch: run a multi-worker job as local processes"};
  app.add_option("--workers", workers_count, "worker processes")->capture_default_str();
  app.add_option("--replicas-per-worker", replicas, "replicas in each worker")
      ->capture_default_str();
  app.add_option("--grace-seconds", grace_seconds,
                 "after a failure, SIGKILL workers still running after this long")
      ->capture_default_str();
  app.add_option("command", command, "the worker command, after --")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (workers_count < 1 || replicas < 1) {
    std::cerr << "dist-launch: --workers and --replicas-per-worker must be at least 1" << std::endl;
    return 2;
  }

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_signal);
  signal(SIGPIPE, SIG_IGN);  // a closed terminal must not kill the launcher before its workers
  std::vector<Worker> workers;
  try {
    auto ports = dist::free_loopback_ports(workers_count);
    for (int i = 0; i < workers_count; ++i)
      workers.push_back(start(command, dist::local_tf_config(ports, i), i, replicas));
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    signal_all(workers, SIGKILL);
    return 1;
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
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_seconds);
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
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_seconds);
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
  return result;
}
