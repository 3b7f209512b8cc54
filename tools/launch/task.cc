#include "task.h"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

namespace dist::launch {

volatile sig_atomic_t forwarded_signal = 0;
void on_signal(int signal) { forwarded_signal = signal; }

namespace {

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

}  // namespace

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

void signal_all(std::vector<Task>& tasks, int signal) {
  for (auto& t : tasks)
    if (!t.exited) kill(-t.pid, signal);
}

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

}  // namespace dist::launch
