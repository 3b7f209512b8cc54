// A job whose tasks all run on this machine, on 127.0.0.1: free ports for them and the TF_CONFIG
// text of each task (cluster_spec.h), so that a program can start a multi-worker or
// parameter-server job as local processes, as dist-launch does, or as threads of one test. And
// the TF_CONFIG of workers at given addresses, for a launcher that places them itself
// (dist-launch --hosts).
//
//   dist::LocalJob job({{"chief", 1}, {"worker", 2}, {"ps", 1}});
//   setenv("TF_CONFIG", job.tf_config("worker", 1).c_str(), 1);  // in worker:1's process
//
// The ports were free when chosen, not reserved: a process that binds one first takes it, so
// start the tasks soon after. Every function here is thread-safe; a LocalJob does not change
// after construction.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dist {

// n distinct TCP ports on 127.0.0.1 that were free a moment ago (bound, then released), chosen
// below the range the kernel hands out by itself where it leaves room, so that no outgoing
// connection is given one before the job listens on it. Throws Error when no port is free.
std::vector<int> free_loopback_ports(int n);

// TF_CONFIG text for workers at addresses[i] ("host:port"), as task worker:index:
//   {"cluster": {"worker": ["10.0.0.1:8888", ...]}, "task": {"type": "worker", "index": 1}}
std::string workers_tf_config(const std::vector<std::string>& addresses, int index);

// TF_CONFIG text for workers at 127.0.0.1:ports[i], as task worker:index.
std::string local_tf_config(const std::vector<int>& ports, int index);

// A local job of several task types on 127.0.0.1 (a chief, workers, ps tasks, an evaluator).
class LocalJob {
 public:
  // `counts`: task type -> how many tasks of that type ("chief" and "evaluator": at most 1).
  // Picks a free port for each task (free_loopback_ports); throws Error when it cannot.
  explicit LocalJob(const std::map<std::string, int>& counts);
  // TF_CONFIG text naming every task of the job and this task, `type`:`index`.
  std::string tf_config(const std::string& type, int index) const;
  // The port of task `type`:`index`; std::out_of_range for a task the job does not have.
  int port(const std::string& type, int index) const;
  // Every task's port: task type -> ports in index order.
  const std::map<std::string, std::vector<int>>& ports() const { return ports_; }

 private:
  std::map<std::string, std::vector<int>> ports_;
};

}  // namespace dist
