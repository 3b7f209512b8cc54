#include "multi_worker/process_group.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
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

std::string all_output(const std::vector<ProcessResult>& results) {
  std::string out;
  for (size_t i = 0; i < results.size(); ++i)
    out += "--- worker " + std::to_string(i) + " (exit " + std::to_string(results[i].exit_code) +
           ")\n" + results[i].output;
  return out;
}

// The text of a /proc file, "" if it cannot be read. A process may exit between the listing of
// /proc and the read, which then fails with ESRCH: libstdc++'s file buffer throws on such a
// read error into an istreambuf_iterator, while a stream insertion only sets failbit.
std::string read_proc_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<pid_t> store_hosts(int port) {
  std::vector<pid_t> pids;
  const std::string wanted = std::string("--port") + '\0' + std::to_string(port) + '\0';
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = read_proc_file(entry.path() / "cmdline");
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

std::vector<std::string> environment_of(pid_t pid) {
  const std::string all = read_proc_file("/proc/" + std::to_string(pid) + "/environ");
  std::vector<std::string> entries;
  for (size_t start = 0, end; start < all.size(); start = end + 1) {
    end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    entries.push_back(all.substr(start, end - start));
  }
  return entries;
}

bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, name, state;
  if (!(stat >> pid_field >> name >> state)) return true;
  return state == "Z";
}

std::vector<pid_t> processes_of_job(const std::string& token) {
  const std::string wanted = "DIST_JOB_TOKEN=" + token;
  std::vector<pid_t> pids;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stoi(name));
    const auto environment = environment_of(pid);
    if (!gone(pid) &&
        std::find(environment.begin(), environment.end(), wanted) != environment.end())
      pids.push_back(pid);
  }
  return pids;
}

bool job_gone_within(const std::string& token, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (processes_of_job(token).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t pid : processes_of_job(token)) ::kill(pid, SIGKILL);
  return false;
}

namespace {

// An IPv4 address as /proc/net/tcp prints it: 8 hex digits of the address in host byte order.
std::string dotted_quad(const std::string& hex) {
  const unsigned long v = std::stoul(hex, nullptr, 16);
  return std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
         std::to_string((v >> 16) & 0xff) + "." + std::to_string(v >> 24);
}

}  // namespace

std::vector<std::string> listening_addresses_of(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::set<std::string> inodes;  // of the process's sockets
  if (DIR* dir = opendir((proc + "/fd").c_str())) {
    while (dirent* entry = readdir(dir)) {
      char target[256];
      const std::string link = proc + "/fd/" + entry->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      const std::string text(target, static_cast<size_t>(n));
      if (text.rfind("socket:[", 0) == 0) inodes.insert(text.substr(8, text.size() - 9));
    }
    closedir(dir);
  }
  std::vector<std::string> found;
  for (const std::string table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      const auto colon = local.find(':');
      const std::string host = local.substr(0, colon);
      const std::string port = std::to_string(std::stoi(local.substr(colon + 1), nullptr, 16));
      // IPv6 words are printed in the kernel's byte order too; gRPC binds an IPv4 address as
      // the IPv4-mapped ::ffff:a.b.c.d of an IPv6 socket, which is that IPv4 address.
      const bool ipv4_mapped =
          host.size() == 32 && host.compare(0, 24, std::string(16, '0') + "FFFF0000") == 0;
      if (host.size() == 8 || ipv4_mapped) {
        found.push_back(dotted_quad(host.substr(host.size() - 8)) + ":" + port);
      } else {
        const bool any = host.find_first_not_of('0') == std::string::npos;
        found.push_back((any ? std::string("[::]") : "[" + host + "]") + ":" + port);
      }
    }
  }
  return found;
}

}  // namespace dist::testing
