// A cluster of worker processes on this machine (127.0.0.1), for dist-launch and tests; and the
// TF_CONFIG of workers at given addresses (dist-launch --hosts).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dist {

// n distinct TCP ports on 127.0.0.1 that were free a moment ago (bound, then released), chosen
// outside the range the kernel hands out by itself (local_cluster.cc says why).
std::vector<int> free_loopback_ports(int n);

// TF_CONFIG text for workers at addresses[i] ("host:port"), as task worker:index.
std::string workers_tf_config(const std::vector<std::string>& addresses, int index);

// TF_CONFIG text for workers at 127.0.0.1:ports[i], as task worker:index.
std::string local_tf_config(const std::vector<int>& ports, int index);

// A local job of several task types on 127.0.0.1 (a chief, workers, ps tasks, an evaluator):
// free ports for `counts` tasks of each type, and the TF_CONFIG of each task.
class LocalJob {
 public:
  explicit LocalJob(const std::map<std::string, int>& counts);
  // TF_CONFIG text for task `type`:`index`.
  std::string tf_config(const std::string& type, int index) const;
  int port(const std::string& type, int index) const;
  const std::map<std::string, std::vector<int>>& ports() const { return ports_; }

 private:
  std::map<std::string, std::vector<int>> ports_;
};

}  // namespace dist
