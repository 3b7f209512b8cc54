// ClusterSpec and TF_CONFIG: which processes make up a training job and which one this is.
//
// TF_CONFIG is the JSON TensorFlow uses, so existing launch tooling carries over:
//   {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
//                "ps": [...], "evaluator": [...]},
//    "task": {"type": "worker", "index": 1}}
// Collective ranks: the chief (if any) is rank 0, then the workers in order. The chief's
// address (or worker 0's, without a chief) hosts the rendezvous store.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dist/core/host_port.h"

namespace dist {

struct TaskSpec {
  std::string type;  // "chief", "worker", "ps" or "evaluator"
  int index = 0;
  // "worker:1"
  std::string name() const { return type + ":" + std::to_string(index); }
};

class ClusterSpec {
 public:
  ClusterSpec() = default;
  // jobs: task type -> addresses "host:port". Validates like parse_tf_config.
  explicit ClusterSpec(std::map<std::string, std::vector<std::string>> jobs);

  const std::map<std::string, std::vector<std::string>>& jobs() const { return jobs_; }
  int num_tasks(const std::string& type) const;
  HostPort address(const TaskSpec& task) const;

  // The tasks that take part in collectives (chief, then workers), in rank order.
  std::vector<TaskSpec> collective_tasks() const;
  // Rank of `task` among collective_tasks(); throws InvalidArgument for ps/evaluator.
  int collective_rank(const TaskSpec& task) const;
  // Where the rendezvous store lives: the chief, else worker 0.
  HostPort store_address() const;

 private:
  std::map<std::string, std::vector<std::string>> jobs_;
};

struct ClusterConfig {
  ClusterSpec cluster;
  TaskSpec task;
};

// Parses and validates TF_CONFIG text. Every problem is an InvalidArgument naming the JSON
// path and the value, e.g. "TF_CONFIG: cluster.worker[1]: port 70000 is outside 1..65535".
// Checked: valid JSON; cluster and task present; known task types; task index in range;
// well-formed host:port with a port in 1..65535; no address twice; at most one chief; a
// non-empty worker list when there is no chief.
ClusterConfig parse_tf_config(const std::string& text);

// Reads the TF_CONFIG environment variable (InvalidArgument when unset or empty).
ClusterConfig cluster_config_from_environment();

// The tf.distribute.cluster_resolver.TFConfigClusterResolver equivalent.
class TFConfigClusterResolver {
 public:
  TFConfigClusterResolver();  // reads TF_CONFIG
  explicit TFConfigClusterResolver(ClusterConfig config) : config_(std::move(config)) {}
  const ClusterSpec& cluster_spec() const { return config_.cluster; }
  const TaskSpec& task() const { return config_.task; }
  const ClusterConfig& config() const { return config_; }

 private:
  ClusterConfig config_;
};

}  // namespace dist
