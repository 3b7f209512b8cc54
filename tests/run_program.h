// Programs a test runs as a user would, each bounded in time: a shell command line, or one
// process of a binary.
#pragma once

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "multi_worker/process_group.h"

namespace dist::testing {

struct CommandResult {
  int exit_code;       // 128 + the signal when killed
  std::string output;  // stdout and stderr
  double seconds;      // wall time
};

// Runs `command` in a shell under `timeout -s KILL` (coreutils), capturing its output. The
// output comes through a pipe: a command that leaves a process holding it open holds this up.
inline CommandResult run_shell(const std::string& command, int timeout_seconds) {
  const auto start = std::chrono::steady_clock::now();
  const std::string bounded =
      "timeout -s KILL " + std::to_string(timeout_seconds) + " " + command + " 2>&1";
  FILE* pipe = popen(bounded.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed", 0};
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output, seconds};
}

// Runs `binary` with `args` in a process of its own until it exits or `bound` passes (then it
// is killed; see WorkerProcesses::wait_all).
inline ProcessResult run_program(const std::string& binary, const std::vector<std::string>& args,
                                 std::chrono::milliseconds bound) {
  WorkerProcesses process;
  process.start(binary, args, {});
  return process.wait_all(bound).at(0);
}

}  // namespace dist::testing
