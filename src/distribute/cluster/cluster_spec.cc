#include "dist/distribute/cluster_spec.h"

#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "dist/core/error.h"
#include "distribute/cluster/host_name.h"

namespace dist {
namespace {

const std::set<std::string> kTaskTypes = {"chief", "worker", "ps", "evaluator"};

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw InvalidArgument("TF_CONFIG: " + path + ": " + problem);
}

HostPort parse_address(const std::string& path, const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) fail(path, "'" + text + "' is not host:port");
  HostPort address;
  address.host = text.substr(0, colon);
  if (const std::string problem = detail::host_name_problem(address.host); !problem.empty())
    fail(path, problem);
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 6 || port.find_first_not_of("0123456789") != std::string::npos)
    fail(path, "'" + text + "' has no numeric port");
  address.port = std::stoi(port);
  if (address.port < 1 || address.port > 65535)
    fail(path, "port " + port + " of '" + text + "' is outside 1..65535");
  return address;
}

void validate(const std::map<std::string, std::vector<std::string>>& jobs) {
  std::map<std::string, std::string> seen;  // address -> path
  for (const auto& [type, addresses] : jobs) {
    if (!kTaskTypes.count(type))
      fail("cluster." + type,
           "unknown task type '" + type + "' (use chief, worker, ps, evaluator)");
    for (size_t i = 0; i < addresses.size(); ++i) {
      const std::string path = "cluster." + type + "[" + std::to_string(i) + "]";
      parse_address(path, addresses[i]);
      auto [it, inserted] = seen.emplace(addresses[i], path);
      if (!inserted)
        fail(path, "duplicate address '" + addresses[i] + "' (also at " + it->second + ")");
    }
  }
  auto chief = jobs.find("chief");
  if (chief != jobs.end() && chief->second.size() > 1)
    fail("cluster.chief", "has " + std::to_string(chief->second.size()) +
                              " entries; a cluster has at most one chief");
  auto worker = jobs.find("worker");
  const bool has_chief = chief != jobs.end() && !chief->second.empty();
  if (!has_chief && (worker == jobs.end() || worker->second.empty()))
    fail("cluster.worker", "is empty and there is no chief; list at least one worker");
}

}  // namespace

std::string detail::host_name_problem(const std::string& host) {
  const auto shown = [&] { return host.size() <= 40 ? host : host.substr(0, 40) + "..."; };
  if (host.empty() || host.size() > 253)
    return "the host name '" + shown() + "' has " + std::to_string(host.size()) +
           " characters; a host name has 1 to 253";
  for (const char c : host) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == ':' ||
                         c == '[' || c == ']';
    if (!allowed)
      return "the host name '" + shown() +
             "' holds a character that no host name or IP address has; use letters, digits, "
             "'.' and '-' (or an IP address)";
  }
  return "";
}

ClusterSpec::ClusterSpec(std::map<std::string, std::vector<std::string>> jobs)
    : jobs_(std::move(jobs)) {
  validate(jobs_);
}

int ClusterSpec::num_tasks(const std::string& type) const {
  auto it = jobs_.find(type);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

HostPort ClusterSpec::address(const TaskSpec& task) const {
  DIST_CHECK_ARG(task.index >= 0 && task.index < num_tasks(task.type), "task ", task.name(),
                 " is not in the cluster (", num_tasks(task.type), " ", task.type, " tasks)");
  return parse_address("cluster." + task.type,
                       jobs_.at(task.type)[static_cast<size_t>(task.index)]);
}

std::vector<TaskSpec> ClusterSpec::collective_tasks() const {
  std::vector<TaskSpec> tasks;
  for (int i = 0; i < num_tasks("chief"); ++i) tasks.push_back({"chief", i});
  for (int i = 0; i < num_tasks("worker"); ++i) tasks.push_back({"worker", i});
  return tasks;
}

int ClusterSpec::collective_rank(const TaskSpec& task) const {
  auto tasks = collective_tasks();
  for (size_t r = 0; r < tasks.size(); ++r)
    if (tasks[r].type == task.type && tasks[r].index == task.index) return static_cast<int>(r);
  throw InvalidArgument("task " + task.name() +
                        " does not take part in collectives (only chief and worker tasks do)");
}

HostPort ClusterSpec::store_address() const { return address(collective_tasks().at(0)); }

ClusterConfig parse_tf_config(const std::string& text) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail("(root)", std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) fail("(root)", "expected a JSON object, got " + root.dump());
  if (!root.contains("cluster"))
    fail("cluster", "missing; TF_CONFIG needs \"cluster\" and \"task\"");
  if (!root.contains("task")) fail("task", "missing; TF_CONFIG needs \"cluster\" and \"task\"");
  // Kubeflow's TFJob operator adds "environment": "cloud"; TensorFlow reads it as a string.
  if (root.contains("environment") && !root["environment"].is_string())
    fail("environment",
         "expected a string (TFJob writes \"cloud\"), got " + root["environment"].dump());
  const auto& cluster = root["cluster"];
  if (!cluster.is_object()) fail("cluster", "expected an object, got " + cluster.dump());

  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& [type, list] : cluster.items()) {
    if (!kTaskTypes.count(type))
      fail("cluster." + type,
           "unknown task type '" + type + "' (use chief, worker, ps, evaluator)");
    if (!list.is_array())
      fail("cluster." + type, "expected a list of \"host:port\", got " + list.dump());
    auto& addresses = jobs[type];
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string())
        fail("cluster." + type + "[" + std::to_string(i) + "]",
             "expected \"host:port\", got " + list[i].dump());
      addresses.push_back(list[i].get<std::string>());
    }
  }
  ClusterConfig config;
  config.cluster = ClusterSpec(std::move(jobs));

  const auto& task = root["task"];
  if (!task.is_object()) fail("task", "expected an object, got " + task.dump());
  if (!task.contains("type") || !task["type"].is_string())
    fail("task.type", "missing or not a string");
  config.task.type = task["type"].get<std::string>();
  if (!kTaskTypes.count(config.task.type))
    fail("task.type",
         "unknown task type '" + config.task.type + "' (use chief, worker, ps, evaluator)");
  if (!task.contains("index") || !task["index"].is_number_integer())
    fail("task.index", "missing or not an integer");
  const auto index = task["index"].get<int64_t>();
  const int count = config.cluster.num_tasks(config.task.type);
  if (index < 0 || index >= count)
    fail("task.index", std::to_string(index) + " is out of range: cluster." + config.task.type +
                           " has " + std::to_string(count) + " entries");
  config.task.index = static_cast<int>(index);
  return config;
}

ClusterConfig cluster_config_from_environment() {
  const char* text = std::getenv("TF_CONFIG");
  DIST_CHECK_ARG(text != nullptr && *text != '\0',
                 "TF_CONFIG is not set: a multi-worker job needs TF_CONFIG describing the cluster "
                 "and this task (dist-launch sets it for local runs)");
  return parse_tf_config(text);
}

TFConfigClusterResolver::TFConfigClusterResolver() : config_(cluster_config_from_environment()) {}

}  // namespace dist
