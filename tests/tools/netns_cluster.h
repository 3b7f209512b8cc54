// A cluster of "hosts" for tests: Linux network namespaces on one bridge, made and removed by
// scripts/netns-cluster.sh (docs/clusters.md, "A test cluster of network namespaces").
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace dist::testing {

inline const std::string kNetnsScript = std::string(DIST_SOURCE_DIR) + "/scripts/netns-cluster.sh";

// Runs `command` in a shell, killed after `seconds`; its exit code (128 + signal when killed)
// and output.
inline std::pair<int, std::string> run_logged(const std::string& command, int seconds) {
  TempDir dir;
  const std::string log = dir.file("out");
  const int status = std::system(
      ("timeout -s KILL " + std::to_string(seconds) + " " + command + " >" + log + " 2>&1")
          .c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, read_file(log)};
}

// A cluster of `hosts` namespaces, named after this process and a counter (two tests at once do
// not meet), torn down when it goes out of scope, failed test or not.
class NetnsCluster {
 public:
  explicit NetnsCluster(int hosts, const std::string& rate = "unlimited") {
    static std::atomic<int> made{0};
    name_ = "dt" + std::to_string(getpid()) + "_" + std::to_string(made++);
    std::tie(status_, output_) =
        run_logged(kNetnsScript + " up " + name_ + " " + std::to_string(hosts) + " " + rate, 60);
    std::istringstream lines(output_);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("198.", 0) == 0) addresses_.push_back(line);
  }
  ~NetnsCluster() { run_logged(kNetnsScript + " down " + name_, 60); }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  // The script's exit code 77: namespaces cannot be made here (output() says why).
  bool unavailable() const { return status_ == 77; }
  int status() const { return status_; }
  const std::string& output() const { return output_; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  std::string hosts() const {
    std::string list;
    for (const auto& a : addresses_) list += (list.empty() ? "" : ",") + a;
    return list;
  }
  // The processes on the cluster's hosts after waiting up to 15 s for them to exit ("" when
  // none is left). The chief's dist-store-host outlives the job by design: it exits about 5 s
  // after the last member's heartbeat stopped (dist/collective/rendezvous_store.h).
  std::string pids() const {
    std::string left;
    using namespace std::chrono_literals;
    for (const auto until = std::chrono::steady_clock::now() + 15s;
         std::chrono::steady_clock::now() < until;) {
      left = run_logged(kNetnsScript + " pids " + name_, 30).second;
      if (left.empty()) break;
      std::this_thread::sleep_for(100ms);
    }
    return left;
  }
  // The script's link-down/link-up of `address`; its exit code.
  int link(const std::string& up_or_down, const std::string& address) const {
    return run_logged(kNetnsScript + " link-" + up_or_down + " " + address, 30).first;
  }

 private:
  std::string name_;
  int status_ = -1;
  std::string output_;
  std::vector<std::string> addresses_;
};

// Makes `cluster` or leaves the test: skipped where namespaces cannot be made, failed where
// the script failed otherwise.
#define MAKE_CLUSTER(cluster, ...)                             \
  NetnsCluster cluster(__VA_ARGS__);                           \
  if (cluster.unavailable()) GTEST_SKIP() << cluster.output(); \
  ASSERT_EQ(cluster.status(), 0) << cluster.output();          \
  ASSERT_FALSE(cluster.addresses().empty()) << cluster.output()

}  // namespace dist::testing
