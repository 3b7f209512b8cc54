#include "multi_worker/process_group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dist::testing {

WorkerProcesses::~WorkerProcesses() {
  for (auto& p : processes_) {
    if (!p.done && p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      waitpid(p.pid, nullptr, 0);
    }
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

void WorkerProcesses::start(const std::string& binary, const std::vector<std::string>& args,
                            const std::vector<std::string>& env) {
  if (dir_.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "dist_workers_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
  }
  Process p;
  p.output_path = dir_ + "/worker" + std::to_string(processes_.size()) + ".out";
  p.started = std::chrono::steady_clock::now();
  p.pid = fork();
  if (p.pid < 0) throw std::runtime_error("fork failed");
  if (p.pid == 0) {
    int fd = open(p.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  processes_.push_back(std::move(p));
}

bool WorkerProcesses::poll(Process& p) {
  if (p.done) return true;
  int status = 0;
  if (waitpid(p.pid, &status, WNOHANG) != p.pid) return false;
  p.done = true;
  p.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  p.result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count();
  std::ifstream in(p.output_path);
  std::ostringstream text;
  text << in.rdbuf();
  p.result.output = text.str();
  return true;
}

std::vector<ProcessResult> WorkerProcesses::wait_all(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (auto& p : processes_) all = poll(p) && all;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<ProcessResult> results;
  for (auto& p : processes_) {
    if (!poll(p)) {
      ::kill(p.pid, SIGKILL);
      waitpid(p.pid, nullptr, 0);
      p.done = true;
      p.result.exit_code = -1;  // timed out
      std::ifstream in(p.output_path);
      std::ostringstream text;
      text << in.rdbuf();
      p.result.output = text.str() + "\n[killed: still running after the test's timeout]";
    }
    results.push_back(p.result);
  }
  return results;
}

bool WorkerProcesses::wait_for_output(size_t i, const std::string& text,
                                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(processes_.at(i).output_path);
    std::ostringstream content;
    content << in.rdbuf();
    if (content.str().find(text) != std::string::npos) return true;
    if (poll(processes_[i])) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void WorkerProcesses::kill(size_t i, int signal) { ::kill(processes_.at(i).pid, signal); }

std::vector<pid_t> store_hosts(int port) {
  std::vector<pid_t> pids;
  const std::string wanted = std::string("--port") + '\0' + std::to_string(port) + '\0';
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find("dist-store-host") != std::string::npos &&
        cmdline.find(wanted) != std::string::npos)
      pids.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return pids;
}

namespace {

// Whether a listening socket could take 127.0.0.1:port now (SO_REUSEADDR, as the store does,
// so connections left in TIME_WAIT do not count).
bool port_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd, 1) == 0;
  close(fd);
  return ok;
}

}  // namespace

bool wait_until_store_host_gone(int port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (store_hosts(port).empty() && port_free(port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t pid : store_hosts(port)) ::kill(pid, SIGKILL);  // not our child: init reaps it
  return false;
}

}  // namespace dist::testing
