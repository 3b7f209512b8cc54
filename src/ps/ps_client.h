// The ps tasks as seen from the coordinator and the workers: where each variable's shards
// live, and calls with a deadline whose failures name the ps task and its address.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/distribute/partitioner.h"
#include "ps/parameter_server.grpc.pb.h"

namespace dist::ps {

struct Task {
  std::string name;     // "ps:1"
  std::string address;  // "127.0.0.1:2223"
  std::string describe() const { return name + " (" + address + ")"; }
};

// A variable split along dim 0 (one shard if not partitioned), each shard on one ps task.
struct PlacedVariable {
  std::string name;           // "m0/0.weight": the model's number, then the parameter's name
  std::vector<int> ps;        // the task of each shard
  std::vector<int64_t> rows;  // the rows of each shard (empty: not split; one whole shard)
  std::vector<std::string> shard_names() const;
  int num_shards() const { return static_cast<int>(ps.size()); }
};

class ParameterServers {
 public:
  ParameterServers(std::vector<Task> tasks, std::chrono::milliseconds timeout);

  int size() const { return static_cast<int>(tasks_.size()); }
  const Task& task(int ps) const { return tasks_[static_cast<size_t>(ps)]; }

  // Places `name` (shape, dtype) by `partitioner`, shards round-robin from the task after the
  // last one used: every process places the same variables in the same order, so all agree.
  PlacedVariable place(const std::string& name, const at::Tensor& value,
                       const Partitioner& partitioner);

  // Waits (up to `timeout`) until every ps task answers a Ping; CollectiveError naming the
  // first that does not.
  void wait_until_ready(std::chrono::milliseconds timeout, const std::string& from);

  void create(const PlacedVariable& variable, const at::Tensor& value);
  // The whole value of each variable, reading every shard (one call per ps task, in parallel).
  std::vector<at::Tensor> read(const std::vector<const PlacedVariable*>& variables);
  // Rows `ids` (global row numbers) of a variable: each ps task is asked for its rows only.
  at::Tensor lookup(const PlacedVariable& variable, const at::Tensor& ids);
  // Dense gradients (whole shapes) and sparse ones (rows, values) of variables; each ps task
  // gets one call with its shards' parts.
  struct Sparse {
    at::Tensor rows;    // global row numbers, distinct
    at::Tensor values;  // [rows, ...]
  };
  void apply(const rpc::OptimizerConfig& optimizer,
             const std::vector<std::pair<const PlacedVariable*, at::Tensor>>& dense,
             const std::vector<std::pair<const PlacedVariable*, Sparse>>& sparse);
  void assign(const PlacedVariable& variable, const at::Tensor& value);

  // The optimizer state beside a variable: its slots, empty before the first update.
  struct Slots {
    std::string kind;  // "SGD", "Adam", "Adagrad"; empty before the first update
    std::map<std::string, at::Tensor> tensors;
    int64_t optimizer_steps = 0;  // the most updates any shard has taken
  };
  // The state of a shard no update has reached, for slot `slot` (shaped like `like` but with
  // `rows` rows): what the optimizer would start from.
  using FreshSlot =
      std::function<at::Tensor(const std::string& slot, const at::Tensor& like, int64_t rows)>;
  // A split variable's shards joined along dim 0: sparse updates reach only the shards their
  // rows fall in, so a shard without state gets `fresh` state; a scalar slot ("step") is the
  // first answering shard's.
  Slots read_slots(const PlacedVariable& variable, const FreshSlot& fresh);
  // Sets value and slots (split like the value) at once; the ps makes `optimizer` for them if
  // no update has yet.
  void assign(const PlacedVariable& variable, const at::Tensor& value, const Slots& slots,
              const rpc::OptimizerConfig& optimizer);
  void shutdown_all(const std::string& from);

  // Tensor bytes sent and received so far (what crosses the wire, without framing).
  int64_t bytes_sent() const { return sent_.load(); }
  int64_t bytes_received() const { return received_.load(); }

 private:
  rpc::ParameterServer::Stub& stub(int ps) { return *stubs_[static_cast<size_t>(ps)]; }
  void check(const grpc::Status& status, int ps, const std::string& what) const;
  std::unique_ptr<grpc::ClientContext> context() const;

  std::vector<Task> tasks_;
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> stubs_;
  std::chrono::milliseconds timeout_;
  int next_ps_ = 0;
  std::atomic<int64_t> sent_{0}, received_{0};
};

}  // namespace dist::ps
