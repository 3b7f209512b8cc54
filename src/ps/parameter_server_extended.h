// The StrategyExtended of ParameterServerStrategy, seen by the ClusterCoordinator (which needs
// the job's tasks and this task's role) and by the strategy handle.
//
// Every process of the job makes the same models in the same order, so every process places
// the same variables on the same ps tasks without talking: model k's parameter p is the
// variable "m<k>/<p>". The chief creates them on the ps tasks; a worker's step reads the
// current values before the user's step function runs (run_replicas) and sends the gradients
// in apply_gradients, where the ps tasks apply the optimizer. A ShardedEmbedding's table is the
// exception: a step reads only the rows its ids name and sends only those rows' gradients.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective/local/local_communicator.h"
#include "dist/distribute/parameter_server_strategy.h"
#include "dist/distribute/sharded_embedding.h"
#include "dist/distribute/strategy_extended.h"
#include "ps/ps_client.h"

namespace dist {

class ParameterServerExtended : public StrategyExtended,
                                public std::enable_shared_from_this<ParameterServerExtended> {
 public:
  ParameterServerExtended(ParameterServerOptions options, ClusterConfig config);

  std::string name() const override { return "parameter_server"; }
  // A step is one worker's: one replica, no collective with the other workers (asynchronous
  // training), so cross-worker agreement is local too.
  int num_replicas_in_sync() const override { return 1; }
  const std::vector<DeviceName>& local_devices() const override { return devices_; }
  int num_workers() const override { return 1; }
  int worker_index() const override { return 0; }
  bool is_chief() const override { return config_.task.type == "chief"; }
  std::string worker_name(int) const override { return task_description(); }
  void report_failure(const std::string&) override {}

  void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) override;
  void all_reduce_across_workers(std::vector<at::Tensor>&, ReduceOp) const override {}
  at::Tensor all_gather_across_workers(const at::Tensor& local) const override { return local; }

  std::shared_ptr<DistributedVariables> create_variables(
      std::shared_ptr<torch::nn::Module> primary) override;
  void apply_gradients(DistributedVariables& variables,
                       torch::optim::Optimizer& optimizer) override;
  // Steps are scheduled on the workers (scheduled_step_runner.h); ps and worker tasks serve.
  std::unique_ptr<StepRunner> make_step_runner(const Strategy& self, TrainStep step) override;
  StepSchedule step_schedule() const override;

  // ---- for the coordinator and the placed variables ----
  const ParameterServerOptions& options() const { return options_; }
  const ClusterConfig& config() const { return config_; }
  const std::string& task_type() const { return config_.task.type; }
  // "worker:1 (127.0.0.1:2223)"
  std::string task_description() const;
  ps::ParameterServers& parameter_servers() { return *servers_; }
  // Before a step: the current values of every variable this process placed, except the
  // embedding tables (their rows are looked up by the step).
  void pull_all();
  // Writes module `model`'s values to the ps tasks (after a checkpoint restore on the chief).
  void push_values(int model);
  // Every value of module `model`, tables too (before a checkpoint is written).
  void pull(int model);
  // The optimizer slots the ps tasks keep beside module `model`'s variables into `optimizer`
  // (an optimizer over its parameters), and back (after a checkpoint restore on the chief).
  void pull_slots(int model, torch::optim::Optimizer& optimizer);
  void push_slots(int model, torch::optim::Optimizer& optimizer);

 private:
  struct Table {
    size_t parameter;  // its index in parameters()
    std::shared_ptr<ShardedEmbeddingImpl> layer;
  };
  struct PlacedModel {
    std::shared_ptr<torch::nn::Module> module;
    std::vector<ps::PlacedVariable> variables;  // one per parameter, in parameters() order
    std::vector<Table> tables;
    bool is_table(size_t parameter) const;
  };
  // Finds the ShardedEmbedding layers of `placed` and, on tasks that run steps, has their
  // forward look rows up on the ps tasks.
  void connect_tables(PlacedModel& placed);
  void read_into(const std::vector<int>& models, bool whole_tables);

  ParameterServerOptions options_;
  ClusterConfig config_;
  std::vector<DeviceName> devices_;
  std::unique_ptr<collective::LocalCommunicator> group_;
  std::unique_ptr<ps::ParameterServers> servers_;
  std::mutex models_mutex_;
  std::vector<PlacedModel> models_;
  bool servers_ready_ = false;
};

}  // namespace dist
