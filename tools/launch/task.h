// The processes of a dist-launch job: how each is started, its output read and prefixed with
// its name, and its exit seen, without ever blocking the launcher's one loop.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace dist::launch {

using Clock = std::chrono::steady_clock;

// One process of the job.
struct Task {
  std::string name;    // worker:0, or in a parameter-server job chief, worker:1, ps:0, evaluator
  std::string type;    // TF_CONFIG's task type
  std::string config;  // its TF_CONFIG, to start it again
  int restarts = 0;    // times it was started again (--restart-workers)
  pid_t pid = -1;
  int output = -1;  // read end of the task's stdout+stderr pipe
  std::string partial_line;
  bool exited = false;
  int exit_code = 0;   // 128 + signal when a signal ended it
  std::string ending;  // "code 1" or "signal 9 (Killed)"
  // Once the job is ending: when it gets SIGTERM (unless it got a signal already) and SIGKILL.
  Clock::time_point terminate_at = Clock::time_point::max();
  Clock::time_point kill_at = Clock::time_point::max();
  bool signalled = false;
};

// How one task is started: its argv, the environment it gets beyond the launcher's (TF_CONFIG
// among it), and with `feed_input` the text its stdin receives (else it reads the launcher's).
struct Launch {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  bool feed_input = false;
  std::string input;
};

// The signal the launcher was sent (SIGINT, SIGTERM, SIGHUP), 0 until one comes: the loops of
// the jobs read it and pass it on (on_signal is the handler that sets it).
extern volatile sig_atomic_t forwarded_signal;
void on_signal(int signal);

// Forks and execs `launch` in a process group of its own that dies with the launcher, its
// output into a pipe the launcher reads. Throws std::runtime_error when pipe or fork fails.
Task start(const Launch& launch, const std::string& name, const std::string& type,
           const std::string& config);

// `signal` to the process group of every task still running.
void signal_all(std::vector<Task>& tasks, int signal);

// Prints what the tasks wrote, waiting up to 100 ms for something to arrive.
void pump_output(std::vector<Task>& tasks);

// Prints what the tasks printed last, to the end of their output.
void drain_output(std::vector<Task>& tasks);

// Whether `task` has just exited (then its exit code is set); never blocks.
bool reap(Task& task);

size_t count_running(const std::vector<Task>& tasks);

}  // namespace dist::launch
