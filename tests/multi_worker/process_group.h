// Forked worker processes for multi-worker tests: started with their own TF_CONFIG, output
// captured to files, always killed and reaped on destruction (no process outlives a test).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dist::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string output;
  double seconds = 0;  // from start until it exited
};

class WorkerProcesses {
 public:
  WorkerProcesses() = default;
  ~WorkerProcesses();  // SIGKILLs and reaps whatever still runs
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  // Starts `binary args...` with the given extra environment ("NAME=value").
  void start(const std::string& binary, const std::vector<std::string>& args,
             const std::vector<std::string>& env);
  // Waits until every process exited or `timeout` passed (then kills the rest); returns
  // each one's result in start order.
  std::vector<ProcessResult> wait_all(std::chrono::milliseconds timeout);
  // Waits until process i's output contains `text` (false on timeout or exit).
  bool wait_for_output(size_t i, const std::string& text, std::chrono::milliseconds timeout);
  void kill(size_t i, int signal);
  pid_t pid(size_t i) const { return processes_.at(i).pid; }
  size_t size() const { return processes_.size(); }

 private:
  struct Process {
    pid_t pid = -1;
    std::string output_path;
    std::chrono::steady_clock::time_point started;
    bool done = false;
    ProcessResult result;
  };
  bool poll(Process& p);
  std::vector<Process> processes_;
  std::string dir_;
};

// Every process's output under a line "--- worker i (exit code)", for a failed expectation.
std::string all_output(const std::vector<ProcessResult>& results);

// The text of a /proc file, "" if it cannot be read (its process gone meanwhile).
std::string read_proc_file(const std::string& path);

// The dist-store-host processes serving the store on 127.0.0.1:port (found by command line).
std::vector<pid_t> store_hosts(int port);
// Waits until no dist-store-host serves `port` and the port can be bound again; false on
// timeout, after SIGKILLing the ones left (so none outlives the test).
bool wait_until_store_host_gone(int port, std::chrono::milliseconds timeout);

// What `ps` and `ss` would show of a job's processes, read from /proc.

// The NUL-separated entries of /proc/<pid>/environ (none for a process gone).
std::vector<std::string> environment_of(pid_t pid);
// Gone, or a zombie nobody reaped yet (it no longer runs).
bool gone(pid_t pid);
// The running processes whose environment holds DIST_JOB_TOKEN=token: one test's job,
// processes that are nobody's child any more included.
std::vector<pid_t> processes_of_job(const std::string& token);
// Whether every process of the job has ended within `seconds`; SIGKILLs the rest if not (no
// process outlives the test).
bool job_gone_within(const std::string& token, int seconds);
// The local addresses of every TCP socket process `pid` listens on: which interfaces its servers
// really bound. "127.0.0.1:4242" (also for the IPv4-mapped IPv6 ::ffff:127.0.0.1 gRPC binds),
// "0.0.0.0:80" for any IPv4 address, "[::]:80" for any IPv6 one.
std::vector<std::string> listening_addresses_of(pid_t pid);

}  // namespace dist::testing
