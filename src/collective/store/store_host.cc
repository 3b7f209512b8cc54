#include "collective/store/store_host.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "collective/store/member_list.h"
#include "core/stop_request.h"
#include "dist/core/error.h"

extern char** environ;

namespace dist::collective {
namespace {

using Clock = std::chrono::steady_clock;

bool executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

// Reads up to the first newline, until EOF or the deadline. *timed_out tells which.
std::string read_line(int fd, Clock::time_point deadline, bool* timed_out) {
  std::string line;
  *timed_out = false;
  while (line.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      *timed_out = true;
      break;
    }
    if (detail::pending_stop_signal() != 0) break;  // the caller throws StopRequested
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 250)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[256];
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: it exited without a word
    line.append(buffer, static_cast<size_t>(n));
  }
  return line.substr(0, line.find('\n'));
}

// dist-store-host in the directory of the running executable ("" if that cannot be read).
std::string beside_this_program() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  return (self.parent_path() / "dist-store-host").string();
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

StoreHostChoice locate_store_host() {
  if (const char* chosen = std::getenv("DIST_STORE_HOST"); chosen && *chosen) {
    if (std::string(chosen) == "chief") return {};
    DIST_CHECK_ARG(executable(chosen), "DIST_STORE_HOST=", chosen,
                   " is not an executable file; set it to the path of dist-store-host (installed "
                   "next to dist-train), or to 'chief' to host the store in the chief process");
    return {chosen, false};
  }
  // Next to the running program first: an installed tree that was moved elsewhere keeps its
  // tools together, and the paths compiled in would then name nothing (or an older copy).
  if (const std::string beside = beside_this_program(); executable(beside)) return {beside, false};
  for (const char* candidate : {DIST_STORE_HOST_INSTALLED, DIST_STORE_HOST_BUILT})
    if (executable(candidate)) return {candidate, false};
  return {"", true};
}

std::string missing_store_host_warning() {
  return detail::concat("warning: dist-store-host not found (looked beside this program, at ",
                        DIST_STORE_HOST_INSTALLED, " and ", DIST_STORE_HOST_BUILT,
                        "), so the chief hosts the rendezvous store itself and a crash of the "
                        "chief will abort the other workers; set DIST_STORE_HOST to its path");
}

namespace {

// dist-store-host's command line, reporting on `ready_fd`.
std::vector<std::string> store_host_arguments(const StoreHostRequest& request, int ready_fd) {
  std::vector<std::string> arguments{request.binary,
                                     "--host",
                                     request.at.host,
                                     "--port",
                                     std::to_string(request.at.port),
                                     "--members",
                                     compact_member_list(request.members),
                                     "--rendezvous-timeout-ms",
                                     std::to_string(request.rendezvous_timeout.count()),
                                     "--collective-timeout-ms",
                                     std::to_string(request.collective_timeout.count()),
                                     "--ready-fd",
                                     std::to_string(ready_fd)};
  if (request.elastic) arguments.emplace_back("--elastic");
  return arguments;
}

// This process's environment with DIST_JOB_TOKEN set to the job's token (the command line would
// show it to every user of the machine in ps).
// The job's identity goes the same way, so that the host's store knows which job it serves.
std::vector<std::string> store_host_environment(const StoreHostRequest& request) {
  std::vector<std::string> environment;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "DIST_JOB_TOKEN", 14) != 0 && std::strncmp(*e, "DIST_JOB_ID=", 12) != 0)
      environment.emplace_back(*e);
  environment.push_back("DIST_JOB_TOKEN=" + request.job_token);
  environment.push_back("DIST_JOB_ID=" + request.job_id);
  return environment;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

void start_store_host(const StoreHostRequest& request) {
  const std::string where = detail::concat(request.at.to_string(), " (", request.requested_by, ")");
  auto fail = [&](const std::string& why) {
    return CollectiveError(
        detail::concat("cannot host the rendezvous store at ", where, ": ", why));
  };
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0)
    throw fail(detail::concat("pipe failed: ", std::strerror(errno)));
  // The host's copy of the write end must survive exec: dup2 to another number clears
  // O_CLOEXEC (dup2 onto the same number would not).
  const int child_fd = pipe_fds[1] == 3 ? 4 : 3;
  std::vector<std::string> args = store_host_arguments(request, child_fd);
  std::vector<std::string> environment = store_host_environment(request);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], child_fd);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, request.binary.c_str(), &actions, nullptr,
                                  pointers_to(args).data(), pointers_to(environment).data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    throw fail(detail::concat("cannot run ", request.binary, ": ", std::strerror(spawned),
                              "; set DIST_STORE_HOST to the path of dist-store-host"));
  }
  bool timed_out = false;
  const auto wait = request.rendezvous_timeout + kStoreHostStartAllowance;
  const std::string line = read_line(pipe_fds[0], Clock::now() + wait, &timed_out);
  close(pipe_fds[0]);  // a host still binding gets EPIPE on its report and exits
  // The spawned process only forks the real host and exits, so this returns at once; it is
  // killed first only if it hung before forking.
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (line == "ready") return;
  detail::throw_if_stop_requested("starting the rendezvous store's host");
  if (line.rfind("error: ", 0) == 0) throw fail(line.substr(7) + "; is the port in use?");
  if (timed_out)
    throw fail(detail::concat(request.binary, " did not report within ", wait.count() / 1000.0,
                              " s (rendezvous timeout + start-up allowance)"));
  // Exit code 0 is the spawned process having forked the host, which then died silently.
  const bool forked = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  throw fail(detail::concat(request.binary, " stopped without reporting",
                            forked ? "" : " (" + describe_status(status) + ")",
                            "; run it by hand to see why"));
}

}  // namespace dist::collective
