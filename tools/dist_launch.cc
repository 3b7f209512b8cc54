// dist-launch: starts a multi-worker job on this machine, for trying it out and for tests, or
// on given hosts through ssh (or any command prefix).
//
//   dist-launch --workers 2 [--replicas-per-worker 2] -- dist-train --strategy multi_worker
//   dist-launch --hosts 10.0.0.1,10.0.0.2 [--host-command 'ssh {host}'] -- dist-train ...
//   dist-launch --workers 2 --ps 1 [--evaluator] [--restart-workers] -- my_ps_program ...
//
// Picks free loopback ports, starts one process per worker with TF_CONFIG naming its task
// (and DIST_REPLICAS_PER_WORKER), prefixes every line they print with the task name, stops
// all of them as soon as one fails (SIGTERM, then SIGKILL after a grace period).
//
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
// stopped and the job starts again on fresh ports (with --hosts the same ones), at most K times;
// dist-train resumes from the latest checkpoint in its --checkpoint-dir. Exit codes 2 and 3 (bad
// flags, bad data) are not restarted. The workers see DIST_RESTART_COUNT (0 on the first run).
//
// Parameter-server jobs (--ps M, M > 0): one chief, --workers N workers, M ps tasks and, with
// --evaluator, one evaluator, all running the same command with TF_CONFIG naming their task
// (dist::LocalJob); output lines are prefixed [chief], [worker:1], [ps:0], [evaluator], and the
// launcher prints each task's pid as it starts it and each task's exit. The chief is the
// coordinator and the loss of a worker is its to handle: a worker or the evaluator that fails
// does not stop the job, nor does a ps task (the chief then fails by itself, naming it). The job
// ends with the chief: the other tasks get --grace-seconds to exit by themselves (the chief's
// shutdown tells them to), then SIGTERM, then SIGKILL after --grace-seconds more; the exit code
// is the chief's. After a chief that succeeded the evaluator gets --evaluator-seconds instead, to
// evaluate the last checkpoint (it exits by itself after that one). With --restart-workers, a
// worker that fails while the chief runs is started again with the same TF_CONFIG, at most
// kMaxWorkerRestarts times per worker. --max-restarts counts failures of the chief: each starts the
// whole job again. On a signal every task gets it.
//
// Job identity: every worker gets DIST_JOB_ID, new for each launch and each restart of it (or
// the launcher's own DIST_JOB_ID, with the restart's number), so that a job never takes the
// rendezvous store of another one on the same addresses for its own.
// Job token: every worker gets DIST_JOB_TOKEN, 32 random bytes as hex (or the launcher's own
// DIST_JOB_TOKEN), which the rendezvous store demands before it lets a connection in
// (SECURITY.md).
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distribute/local_cluster.h"

namespace {

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

volatile sig_atomic_t forwarded_signal = 0;
void on_signal(int signal) { forwarded_signal = signal; }

// dist-train's exit code after stopping cleanly on SIGTERM/SIGINT (checkpoint saved).
constexpr int kStoppedResumable = 4;
// --restart-workers starts one worker again at most this often: one that fails as it starts
// must not loop forever.
constexpr int kMaxWorkerRestarts = 10;

// How one task is started: its argv, the environment it gets beyond the launcher's (TF_CONFIG
// among it), and with `feed_input` the text its stdin receives (else it reads the launcher's).
struct Launch {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  bool feed_input = false;
  std::string input;
};

// Two pipe ends, or an error.
void make_pipe(int fds[2]) {
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe failed: ") + strerror(errno));
}

// The forked task: its own group, dies with the launcher, output into `out`, stdin from `in`
// (-1: the launcher's), then exec. Never returns.
[[noreturn]] void exec_task(const Launch& launch, pid_t launcher, int out, const int in[2]) {
  setpgid(0, 0);  // its own process group, so stopping it stops its children too
  // Dies with the launcher, even a SIGKILLed one; SIGTERM lets dist-train save first. The
  // launcher may have died before prctl took effect: then stop here.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) _exit(128 + SIGTERM);
  dup2(out, STDOUT_FILENO);
  dup2(out, STDERR_FILENO);
  if (in[0] >= 0) {
    dup2(in[0], STDIN_FILENO);
    close(in[0]);
    close(in[1]);
  }
  for (const auto& entry : launch.env) putenv(const_cast<char*>(entry.c_str()));
  std::vector<char*> argv;
  for (const auto& a : launch.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::cerr << "dist-launch: cannot run " << launch.argv[0] << ": " << strerror(errno) << std::endl;
  _exit(127);
}

Task start(const Launch& launch, const std::string& name, const std::string& type,
           const std::string& config) {
  const pid_t launcher = getpid();
  int out[2];
  int in[2] = {-1, -1};
  make_pipe(out);
  if (launch.feed_input) make_pipe(in);
  Task task;
  task.name = name;
  task.type = type;
  task.config = config;
  task.pid = fork();
  if (task.pid == 0) {
    close(out[0]);
    exec_task(launch, launcher, out[1], in);
  }
  close(out[1]);
  if (in[0] >= 0) {
    close(in[0]);
    // A pipe holds far more than the few bytes of input: this never blocks. A task that died
    // at once makes it fail (SIGPIPE is ignored), which its exit code reports.
    if (task.pid > 0) {
      [[maybe_unused]] const ssize_t written =
          write(in[1], launch.input.data(), launch.input.size());
    }
    close(in[1]);
  }
  if (task.pid < 0) {
    close(out[0]);
    throw std::runtime_error(std::string("fork failed: ") + strerror(errno));
  }
  task.output = out[0];
  return task;
}

void print_lines(Task& task, const char* data, size_t size, bool flush) {
  task.partial_line.append(data, size);
  size_t start = 0, end;
  while ((end = task.partial_line.find('\n', start)) != std::string::npos) {
    std::cout << "[" << task.name << "] " << task.partial_line.substr(start, end - start) << "\n";
    start = end + 1;
  }
  task.partial_line.erase(0, start);
  if (flush && !task.partial_line.empty()) {
    std::cout << "[" << task.name << "] " << task.partial_line << "\n";
    task.partial_line.clear();
  }
  std::cout.flush();
}

void signal_all(std::vector<Task>& tasks, int signal) {
  for (auto& t : tasks)
    if (!t.exited) kill(-t.pid, signal);
}

// Prints what the tasks wrote, waiting up to 100 ms for something to arrive.
void pump_output(std::vector<Task>& tasks) {
  std::vector<pollfd> fds;
  std::vector<Task*> readable;  // the task behind each entry of fds
  for (auto& t : tasks) {
    if (t.output < 0) continue;
    fds.push_back({t.output, POLLIN, 0});
    readable.push_back(&t);
  }
  if (!fds.empty())
    poll(fds.data(), fds.size(), 100);
  else
    usleep(100 * 1000);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Task& t = *readable[i];
    char buffer[4096];
    ssize_t n = read(t.output, buffer, sizeof(buffer));
    if (n > 0) {
      print_lines(t, buffer, static_cast<size_t>(n), false);
    } else {
      print_lines(t, "", 0, true);
      close(t.output);
      t.output = -1;
    }
  }
}

// Prints what the tasks printed last, to the end of their output.
void drain_output(std::vector<Task>& tasks) {
  for (auto& t : tasks) {
    if (t.output < 0) continue;
    char buffer[4096];
    ssize_t n;
    while ((n = read(t.output, buffer, sizeof(buffer))) > 0)
      print_lines(t, buffer, static_cast<size_t>(n), false);
    print_lines(t, "", 0, true);
    close(t.output);
    t.output = -1;
  }
}

// Whether `task` has just exited (then its exit code is set); never blocks.
bool reap(Task& task) {
  int status = 0;
  if (task.exited || waitpid(task.pid, &status, WNOHANG) != task.pid) return false;
  task.exited = true;
  if (WIFEXITED(status)) {
    task.exit_code = WEXITSTATUS(status);
    task.ending = "code " + std::to_string(task.exit_code);
  } else {
    task.exit_code = 128 + WTERMSIG(status);
    task.ending =
        "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return true;
}

size_t count_running(const std::vector<Task>& tasks) {
  size_t running = 0;
  for (const auto& t : tasks) running += t.exited ? 0 : 1;
  return running;
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
};

// The first worker's port on each host under --hosts without --port-base or DIST_PORT_BASE:
// the default of the Slurm and MPI resolvers (docs/clusters.md).
constexpr int kDefaultPortBase = 8888;

struct JobResult {
  int exit_code = 0;
  bool signalled = false;  // the launcher was asked to stop: not to be restarted
};

// The environment of every task but TF_CONFIG; the token last (host_launch leaves it out).
std::vector<std::string> job_env(const JobSetup& setup) {
  std::vector<std::string> env{"DIST_REPLICAS_PER_WORKER=" + std::to_string(setup.replicas),
                               "DIST_RESTART_COUNT=" + std::to_string(setup.restart)};
  if (setup.min_workers > 0) env.push_back("DIST_MIN_WORKERS=" + std::to_string(setup.min_workers));
  env.push_back("DIST_JOB_ID=" + setup.job_id + "." + std::to_string(setup.restart));
  env.push_back("DIST_JOB_TOKEN=" + setup.job_token);
  return env;
}

// A task on this machine: the command itself, TF_CONFIG and job_env in its environment.
Launch local_launch(const JobSetup& setup, const std::string& config) {
  Launch launch;
  launch.argv = setup.command;
  launch.env = job_env(setup);
  launch.env.push_back("TF_CONFIG=" + config);
  return launch;
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

// Each worker's Launch: on free loopback ports, or with --hosts at its host's address, on
// port_base plus its number among the earlier workers of that host (a port free on a remote
// host cannot be probed from here: --port-base names one).
std::vector<Launch> worker_launches(const JobSetup& setup) {
  std::vector<std::string> addresses, hosts;
  if (setup.hosts.empty()) {
    for (int port : dist::free_loopback_ports(setup.workers))
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
    const std::string config = dist::workers_tf_config(addresses, i);
    launches.push_back(hosts.empty() ? local_launch(setup, config)
                                     : host_launch(setup, hosts[static_cast<size_t>(i)], config));
  }
  return launches;
}

// dist-train's exit codes that a restart cannot cure: bad flags (2), bad data (3), an elastic
// job that ended below its minimum (5).
bool worth_restarting(int exit_code) { return exit_code != 2 && exit_code != 3 && exit_code != 5; }

// An elastic job (--workers MIN:MAX): a worker that fails is started again with the same
// TF_CONFIG and joins the running job (at most kMaxWorkerRestarts times per worker), while the
// others go on without it; nothing is stopped. Once a worker has finished (exit 0) none is
// started again, and the ones still running get --grace-seconds to end by themselves (a joiner
// still waiting for admission) before SIGTERM. Exit code: 0 once a worker finished, else the
// last failure's (the job stopped below its minimum).
JobResult run_elastic_job(const JobSetup& setup, std::vector<Task>& workers,
                          const std::vector<Launch>& launches) {
  int result = 0;
  bool finished = false;
  auto stop_deadline = Clock::time_point::max();
  while (count_running(workers) > 0) {
    if (forwarded_signal != 0 && stop_deadline == Clock::time_point::max()) {
      signal_all(workers, forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal));
      stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
    }
    pump_output(workers);
    const size_t before = workers.size();  // restarted ones are appended
    for (size_t i = 0; i < before; ++i) {
      Task& w = workers[i];
      if (!reap(w)) continue;
      std::cout << "[dist-launch] " << w.name << " exited with " << w.ending;
      finished = finished || w.exit_code == 0;
      if (w.exit_code != 0 && !finished) result = w.exit_code;
      const bool again = !finished && forwarded_signal == 0 && w.exit_code != 0 &&
                         worth_restarting(w.exit_code) && w.restarts < kMaxWorkerRestarts;
      if (finished && stop_deadline == Clock::time_point::max())
        stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
      if (!again) {
        std::cout << std::endl;
        continue;
      }
      std::cout << "; starting it again to join the running job (restart " << w.restarts + 1
                << " of at most " << kMaxWorkerRestarts << ")" << std::endl;
      const size_t index = static_cast<size_t>(std::stoi(w.name.substr(w.name.find(':') + 1)));
      Task replacement = start(launches.at(index), w.name, w.type, w.config);
      replacement.restarts = w.restarts + 1;
      workers.push_back(std::move(replacement));
    }
    if (Clock::now() > stop_deadline) {
      signal_all(workers, SIGTERM);
      if (Clock::now() > stop_deadline + std::chrono::seconds(setup.grace_seconds))
        signal_all(workers, SIGKILL);
    }
  }
  drain_output(workers);
  return {finished ? 0 : result, forwarded_signal != 0};
}

// Runs a multi-worker job's workers until all have exited: the exit code rules of the top
// comment.
JobResult run_workers_job(const JobSetup& setup) {
  std::vector<Task> workers;
  std::vector<Launch> launches;
  try {
    launches = worker_launches(setup);
    for (int i = 0; i < setup.workers; ++i)
      workers.push_back(
          start(launches[static_cast<size_t>(i)], "worker:" + std::to_string(i), "worker", ""));
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    signal_all(workers, SIGKILL);
    return {1, false};
  }
  if (setup.min_workers > 0) return run_elastic_job(setup, workers, launches);

  int result = 0;
  std::string failed;
  bool stopping = false;
  bool signalled = false;
  auto stop_deadline = Clock::time_point::max();
  while (count_running(workers) > 0) {
    if (forwarded_signal != 0 && !stopping) {
      stopping = signalled = true;
      std::cout << "[dist-launch] " << strsignal(forwarded_signal)
                << ": stopping the workers (they save a checkpoint if they have one)" << std::endl;
      signal_all(workers, forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal));
      stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
    }
    pump_output(workers);
    for (auto& w : workers) {
      if (!reap(w)) continue;
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
        stop_deadline = Clock::now() + std::chrono::seconds(setup.grace_seconds);
      }
    }
    if (stopping && Clock::now() > stop_deadline) signal_all(workers, SIGKILL);
  }
  drain_output(workers);
  if (!failed.empty())
    std::cerr << "dist-launch: " << failed << " failed with exit code " << result << std::endl;
  return {result, signalled};
}

// "chief" and "evaluator" are one of a kind; the others are numbered: ps:0, worker:1.
std::string task_name(const std::string& type, int index) {
  return type == "chief" || type == "evaluator" ? type : type + ":" + std::to_string(index);
}

Task start_ps_task(const JobSetup& setup, const std::string& name, const std::string& type,
                   const std::string& config) {
  Task task = start(local_launch(setup, config), name, type, config);
  std::cout << "[dist-launch] started " << name << " (pid " << task.pid << ")" << std::endl;
  return task;
}

// Starts a parameter-server job's tasks in the order a user's launcher would: the ps tasks, the
// workers, the evaluator, the chief last. Returns the chief's place in `tasks`.
size_t start_ps_job(const JobSetup& setup, std::vector<Task>& tasks) {
  std::map<std::string, int> counts = {{"chief", 1}, {"worker", setup.workers}, {"ps", setup.ps}};
  if (setup.evaluator) counts["evaluator"] = 1;
  const dist::LocalJob cluster(counts);
  for (const std::string type : {"ps", "worker", "evaluator", "chief"}) {
    const auto count = counts.find(type);
    for (int i = 0; count != counts.end() && i < count->second; ++i)
      tasks.push_back(start_ps_task(setup, task_name(type, i), type, cluster.tf_config(type, i)));
  }
  return tasks.size() - 1;
}

// Whether --restart-workers starts `task`, which just exited, again.
bool restart_it(const JobSetup& setup, const Task& task, bool chief_running) {
  return setup.restart_workers && chief_running && task.type == "worker" && task.exit_code != 0;
}

// Reports the tasks other than the chief that have just exited, and starts workers again as
// --restart-workers says while `chief_running`.
void handle_exits(const JobSetup& setup, std::vector<Task>& tasks, size_t chief,
                  bool chief_running) {
  const size_t before = tasks.size();  // restarted ones are appended
  for (size_t i = 0; i < before; ++i) {
    if (i == chief || !reap(tasks[i])) continue;
    std::cout << "[dist-launch] " << tasks[i].name << " exited with " << tasks[i].ending;
    if (!restart_it(setup, tasks[i], chief_running)) {
      std::cout << std::endl;
      continue;
    }
    if (tasks[i].restarts >= kMaxWorkerRestarts) {
      std::cout << "; not starting it again: it was started again " << kMaxWorkerRestarts
                << " times already (the chief goes on without it)" << std::endl;
      continue;
    }
    const int restarts = tasks[i].restarts + 1;
    std::cout << "; starting it again (restart " << restarts << " of at most " << kMaxWorkerRestarts
              << ")" << std::endl;
    try {
      Task again = start_ps_task(setup, tasks[i].name, tasks[i].type, tasks[i].config);
      again.restarts = restarts;
      tasks.push_back(std::move(again));
    } catch (const std::exception& e) {
      std::cerr << "dist-launch: cannot start " << tasks[i].name << " again: " << e.what()
                << std::endl;
    }
  }
}

// A signal to the launcher goes to every task once: a second SIGTERM would cut short
// dist-train's checkpoint on the first (a task past its time since the chief exited has had
// SIGTERM already). Each gets `grace` before SIGKILL.
void forward_signal_once(std::vector<Task>& tasks, std::chrono::seconds grace) {
  std::cout << "[dist-launch] " << strsignal(forwarded_signal) << ": stopping every task"
            << std::endl;
  const int signal = forwarded_signal == SIGHUP ? SIGTERM : int(forwarded_signal);
  for (auto& t : tasks) {
    if (t.exited) continue;
    if (!t.signalled) kill(-t.pid, signal);
    t.signalled = true;
    t.kill_at = std::min(t.kill_at, Clock::now() + grace);
  }
}

// The chief has exited: the other tasks get --grace-seconds to exit by themselves, the
// evaluator (after a successful chief) --evaluator-seconds to evaluate the last checkpoint.
void give_tasks_their_time(const JobSetup& setup, std::vector<Task>& tasks, const Task& chief,
                           bool signalled) {
  std::cout << "[dist-launch] chief exited with " << chief.ending;
  if (!signalled && count_running(tasks) > 0) {
    const auto grace = std::chrono::seconds(setup.grace_seconds);
    std::cout << "; the other tasks have " << setup.grace_seconds
              << " s (--grace-seconds) to exit by themselves";
    const bool evaluating = chief.exit_code == 0;
    for (auto& t : tasks) {
      if (t.exited) continue;
      const bool evaluator = evaluating && t.type == "evaluator";
      if (evaluator)
        std::cout << ", the evaluator " << setup.evaluator_seconds
                  << " s (--evaluator-seconds) to evaluate the last checkpoint";
      t.terminate_at =
          Clock::now() + (evaluator ? std::chrono::seconds(setup.evaluator_seconds) : grace);
      t.kill_at = t.terminate_at + grace;
    }
  }
  std::cout << std::endl;
}

// SIGTERM to the tasks past their time, SIGKILL to those past it again.
void enforce_deadlines(std::vector<Task>& tasks) {
  std::string terminated;
  for (auto& t : tasks) {
    if (t.exited) continue;
    if (!t.signalled && Clock::now() >= t.terminate_at) {
      t.signalled = true;
      kill(-t.pid, SIGTERM);
      terminated += " " + t.name;
    } else if (Clock::now() >= t.kill_at) {
      kill(-t.pid, SIGKILL);
    }
  }
  if (!terminated.empty())
    std::cout << "[dist-launch] still running after its time since the chief exited:" << terminated
              << "; sending SIGTERM" << std::endl;
}

// Runs a parameter-server job until the chief and then every other task have exited: the rules
// of the top comment. The result is the chief's exit code.
JobResult run_ps_job(const JobSetup& setup) {
  std::vector<Task> tasks;
  size_t chief = 0;
  try {
    chief = start_ps_job(setup, tasks);
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    signal_all(tasks, SIGKILL);
    return {1, false};
  }

  // After the chief (or a signal): first waiting for the tasks to exit by themselves, then
  // for SIGTERM to end them, then SIGKILL; each task on its own clock, as the evaluator gets
  // longer than the others.
  const auto grace = std::chrono::seconds(setup.grace_seconds);
  bool signalled = false;
  while (count_running(tasks) > 0) {
    if (forwarded_signal != 0 && !signalled) {
      signalled = true;
      forward_signal_once(tasks, grace);
    }
    pump_output(tasks);
    // The chief first: a worker that ends as the chief does is not started again.
    if (reap(tasks[chief])) give_tasks_their_time(setup, tasks, tasks[chief], signalled);
    // Workers are started again only while the chief runs and nothing is stopping the job.
    handle_exits(setup, tasks, chief, !signalled && !tasks[chief].exited);
    enforce_deadlines(tasks);
  }
  drain_output(tasks);
  const int result = tasks[chief].exit_code;
  if (result != 0) std::cerr << "dist-launch: chief failed with exit code " << result << std::endl;
  // The job succeeded, but its evaluation did not: say so last, where it is seen.
  for (const auto& t : tasks)
    if (result == 0 && !signalled && t.type == "evaluator" && t.exit_code != 0)
      std::cerr << "dist-launch: warning: the evaluator exited with " << t.ending
                << " before it had evaluated the last checkpoint (its output above says why)"
                << std::endl;
  return {result, signalled};
}

// The error for flags that make no job, or "" when they make one.
// Every worker holds a connection to every other (Gloo's full mesh) and dist-launch one pipe
// per worker, so a job needs about --workers open files in each process, plus a few dozen of
// their own (the store, the data files, the shared-memory group). Raises this process's soft
// limit to its hard one (the workers inherit it); the error, or "", at once rather than after
// spawning thousands of workers that fail with "Too many open files".
std::string check_open_files(const JobSetup& setup) {
  constexpr int64_t kFilesBesideWorkers = 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return "";
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const int64_t tasks = int64_t{setup.workers} + setup.ps + (setup.evaluator ? 1 : 0);
  const int64_t needed = tasks + kFilesBesideWorkers;
  if (limit.rlim_cur == RLIM_INFINITY || needed <= static_cast<int64_t>(limit.rlim_cur)) return "";
  return "--workers " + std::to_string(setup.workers) + " needs about " + std::to_string(needed) +
         " open files in each process (one per other worker, and " +
         std::to_string(kFilesBesideWorkers) + " more), beyond this machine's limit of " +
         std::to_string(limit.rlim_cur) + " (ulimit -n); start at most " +
         std::to_string(static_cast<int64_t>(limit.rlim_cur) - kFilesBesideWorkers - setup.ps -
                        (setup.evaluator ? 1 : 0)) +
         " workers, or raise the limit";
}

std::string check_setup(const JobSetup& setup, int max_restarts) {
  const std::string ps_only = " needs --ps: only a parameter-server job has ";
  if (setup.ps < 0) return "--ps must be 0 or more, got " + std::to_string(setup.ps);
  if (setup.ps == 0 && setup.restart_workers)
    return "--restart-workers" + ps_only +
           "a coordinator that outlives a worker (a multi-worker job needs every worker: use "
           "--max-restarts)";
  if (setup.ps == 0 && setup.evaluator)
    return "--evaluator" + ps_only + "an evaluator task (add --ps 1 or more)";
  if (setup.ps > 0 && setup.workers < 1)
    return "--workers must be at least 1 with --ps (the workers run the steps), got " +
           std::to_string(setup.workers);
  if (setup.workers < 1 || setup.replicas < 1)
    return "--workers and --replicas-per-worker must be at least 1";
  if (setup.min_workers > 0 && setup.ps > 0)
    return "--workers MIN:MAX (an elastic job) is for multi-worker jobs, not --ps jobs (use "
           "--restart-workers there)";
  if (setup.min_workers > setup.workers)
    return "--workers MIN:MAX needs MIN <= MAX, got " + std::to_string(setup.min_workers) + ":" +
           std::to_string(setup.workers);
  if (!setup.hosts.empty() && setup.ps > 0)
    return "--hosts runs multi-worker jobs only (every task the same command), not --ps jobs";
  if (max_restarts < 0)
    return "--max-restarts must be 0 or more, got " + std::to_string(max_restarts);
  return check_open_files(setup);
}

// dist-launch's flags, into `setup` and `max_restarts`.
void add_flags(CLI::App& app, JobSetup& setup, int& max_restarts) {
  app.add_option("--workers", setup.workers_text,
                 "worker processes; MIN:MAX starts an elastic job of MAX workers that goes on "
                 "while MIN remain and starts lost ones again to join it (dist-train "
                 "--min-workers, docs/elastic.md)")
      ->capture_default_str();
  app.add_option("--replicas-per-worker", setup.replicas, "replicas in each worker")
      ->capture_default_str();
  app.add_option("--grace-seconds", setup.grace_seconds,
                 "after a failure, SIGKILL workers still running after this long (with --ps: "
                 "after the chief exits, SIGTERM the tasks still running after this long, "
                 "SIGKILL them after as long again)")
      ->capture_default_str();
  app.add_option("--max-restarts", max_restarts,
                 "when a worker fails, stop all and start the job again this many times at most "
                 "(dist-train resumes from the latest checkpoint in its --checkpoint-dir); with "
                 "--ps, when the chief fails")
      ->capture_default_str();
  app.add_option("--ps", setup.ps,
                 "ps tasks; more than 0 makes a parameter-server job of one chief, --workers "
                 "workers and these ps tasks, which ends when the chief does")
      ->capture_default_str();
  app.add_flag("--evaluator", setup.evaluator, "with --ps: one evaluator task too");
  app.add_option("--evaluator-seconds", setup.evaluator_seconds,
                 "with --evaluator: after the chief succeeded, how long the evaluator has to "
                 "evaluate the last checkpoint and exit by itself before SIGTERM")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--restart-workers", setup.restart_workers,
               "with --ps: start a worker that fails again while the chief runs (at most " +
                   std::to_string(kMaxWorkerRestarts) + " times per worker)");
  // One string, split here: CLI11's own splitting drops empty items, and an option whose
  // values all vanish made it take the worker's flags for its own ("The following arguments
  // were not expected").
  app.add_option("--hosts", setup.hosts_text,
                 "run the workers on these hosts (comma-separated addresses or names), worker i "
                 "on host i modulo their count, through --host-command; --workers defaults to "
                 "their count");
  app.add_option("--host-command", setup.host_command,
                 "with --hosts: the command that runs a shell command line on a host, its words "
                 "split at spaces, {host} replaced by the host; the line (which reads the job "
                 "token from stdin) comes last")
      ->capture_default_str();
  app.add_option("--port-base", setup.port_base,
                 "with --hosts: the first worker on each host listens on this port, the next on "
                 "the one above (default: DIST_PORT_BASE, else " +
                     std::to_string(kDefaultPortBase) + ")")
      ->check(CLI::Range(1, 65535));
  app.add_option("command", setup.command, "the worker command, after --")->required();
}

// --workers N or MIN:MAX into setup.workers and setup.min_workers. The error, or "".
std::string parse_workers(JobSetup& setup) {
  const std::string& text = setup.workers_text;
  const auto colon = text.find(':');
  try {
    size_t used = 0;
    setup.workers = std::stoi(text.substr(colon == std::string::npos ? 0 : colon + 1), &used);
    if (colon != std::string::npos) {
      size_t min_used = 0;
      setup.min_workers = std::stoi(text.substr(0, colon), &min_used);
      if (min_used != colon || setup.min_workers < 1) throw std::invalid_argument(text);
      used += colon + 1;
    }
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    return "--workers must be a count (2) or MIN:MAX (2:4), got '" + text + "'";
  }
  return "";
}

// --hosts: the port base from --port-base, DIST_PORT_BASE or the default, and --workers from
// the hosts when not given. The error, or "".
std::string apply_hosts(JobSetup& setup, bool hosts_given, bool workers_given) {
  if (!hosts_given) return "";
  std::string host;
  std::istringstream items(setup.hosts_text + ",");  // "a," is "a" and an empty one
  int number = 0;
  while (std::getline(items, host, ',')) {
    ++number;
    if (host.empty())
      return "--hosts '" + setup.hosts_text + "': host " + std::to_string(number) +
             " is empty; list host addresses or names separated by single commas";
    setup.hosts.push_back(host);
  }
  if (!workers_given) setup.workers = static_cast<int>(setup.hosts.size());
  if (setup.port_base == 0) {
    const char* base = std::getenv("DIST_PORT_BASE");
    try {
      setup.port_base = base && *base ? std::stoi(base) : kDefaultPortBase;
    } catch (const std::exception&) {
      return std::string("DIST_PORT_BASE='") + base + "' is not a port number";
    }
  }
  if (setup.port_base < 1 || setup.port_base + setup.workers > 65536)
    return "the workers' ports " + std::to_string(setup.port_base) + ".. do not fit in 1..65535";
  for (const auto& host : setup.hosts)
    if (host.empty() || host.find_first_of(" \t\n'\"") != std::string::npos)
      return "--hosts: '" + host + "' is not a host address or name";
  if (setup.host_command.find_first_not_of(" \t") == std::string::npos)
    return "--host-command is empty";
  return "";
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

int main(int argc, char** argv) {
  JobSetup setup;
  int max_restarts = 0;
  CLI::App app{"dist-launch: run a multi-worker job as local processes, or on given hosts"};
  add_flags(app, setup, max_restarts);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  std::string error = parse_workers(setup);
  if (error.empty())
    error = apply_hosts(setup, app.count("--hosts") > 0, app.count("--workers") > 0);
  if (error.empty()) error = check_setup(setup, max_restarts);
  if (!error.empty()) {
    std::cerr << "dist-launch: " << error << std::endl;
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
    // A launch of its own: the launcher's own DIST_JOB_ID names the job, else a new one.
    if (const char* given = std::getenv("DIST_JOB_ID"); given && *given)
      setup.job_id = given;
    else
      setup.job_id = "dist-launch-" + new_job_token().substr(0, 16);
  } catch (const std::exception& e) {
    std::cerr << "dist-launch: " << e.what() << std::endl;
    return 1;
  }
  unsetenv("DIST_JOB_TOKEN_FILE");  // the workers get the token itself
  return run_with_restarts(setup, max_restarts);
}
