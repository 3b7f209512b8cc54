// MirroredExtended: the implementation behind MirroredStrategy, CentralStorageStrategy and
// MultiWorkerMirroredStrategy. One class serves all three: replica threads in this process,
// composed through a HierarchicalCommunicator with the other processes of the job (none, for
// the in-process strategies: a group of one process). See mirrored_extended.cc for a step.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "collective/communicator.h"
#include "collective/counting_communicator.h"
#include "collective/hierarchical_communicator.h"
#include "dist/distribute/mirrored_strategy.h"
#include "distribute/reduction/gradient_reducer.h"
#include "distribute/reduction/gradient_reduction.h"
#include "distribute/step/host_shared_variables.h"
#include "distribute/step/optimizer_step_plan.h"
#include "distribute/step/sharded_step.h"
#include "distribute/strategies/replica_threads.h"

namespace dist {

class MirroredExtended;

// Mirrored placement: one module per local replica; the copies share the parameters' storage
// with replica 0's (one optimizer step serves all) and keep their own gradients and buffers.
// Made by MirroredExtended::create_variables, which also gives it its reducer and step plan.
class MirroredVariables : public DistributedVariables {
 public:
  MirroredVariables(std::shared_ptr<MirroredExtended> owner,
                    std::vector<std::shared_ptr<torch::nn::Module>> replicas);
  ~MirroredVariables() override;

  std::shared_ptr<torch::nn::Module> primary() const override { return replicas_.front(); }
  std::shared_ptr<torch::nn::Module> replica(int r) const override {
    return replicas_.at(static_cast<size_t>(r));
  }
  int num_replicas() const override { return static_cast<int>(replicas_.size()); }
  std::vector<at::Tensor> trainable_variables() const override {
    return replicas_.front()->parameters();
  }
  void prepare_to_read() override;
  void prepare_to_write() override;
  void gather_values() override;
  void sync_from_primary() override;
  std::vector<int64_t> parameter_sizes(const at::Tensor& parameter) const override;
  void restore(const std::vector<at::Tensor>& parameters,
               const std::vector<at::Tensor>& buffers) override;
  void prepare_to_read_slots(torch::optim::Optimizer& optimizer) override;
  void gather_slots(torch::optim::Optimizer& optimizer) override;
  bool keeps_shares() const override { return parameter_shards_ != nullptr; }
  ShareWorkers share_workers() const override;
  std::vector<Share> parameter_shares() const override;
  std::map<size_t, std::map<std::string, at::Tensor>> slot_shares(
      torch::optim::Optimizer& optimizer) override;
  void restore_slot_shares(
      torch::optim::Optimizer& optimizer,
      const std::map<size_t, std::map<std::string, at::Tensor>>& shares) override;
  StrategyExtended& strategy() const override;

  // Every parameter with the replica copies that hold it (HostSharedVariables values).
  std::vector<HostSharedVariables::Holders> parameter_holders() const;
  const MirroredExtended* owner() const { return owner_.get(); }
  GradientReducer& reducer() const { return *reducer_; }
  OptimizerStepPlan& step_plan() const { return *step_plan_; }

 private:
  friend class MirroredExtended;                              // gives it its reducer and plan, once
  std::vector<std::shared_ptr<torch::nn::Module>> replicas_;  // [0] is the primary
  std::shared_ptr<MirroredExtended> owner_;
  // How this model's optimizer step serves every copy (it may hold the parameters and slots
  // in memory the workers of this host share).
  std::unique_ptr<OptimizerStepPlan> step_plan_;
  // Stage 3 (Sharding::kParameters): this worker's chunks of the parameters; else null.
  std::shared_ptr<ParameterShards> parameter_shards_;
  // Its hooks sit on the copies' parameters; declared last so it goes first.
  std::shared_ptr<GradientReducer> reducer_;
};

class MirroredExtended : public StrategyExtended,
                         public std::enable_shared_from_this<MirroredExtended> {
 public:
  // `cross_process`: the communicator between the job's processes, one member per process;
  // null for a job of this process alone. `overlap_with_backward`: reduce gradients as
  // backward produces them (OverlappedReducer) instead of in apply_gradients.
  // `share_variables_on_host`: workers whose communicator can share memory keep one copy of
  // the variables and optimizer slots and split each optimizer step (HostSharedVariables).
  MirroredExtended(std::string name, MirroredOptions options,
                   std::unique_ptr<collective::Communicator> cross_process,
                   bool overlap_with_backward, bool share_variables_on_host = false);

  std::string name() const override { return name_; }
  int num_replicas_in_sync() const override { return members_.front()->size(); }
  const std::vector<DeviceName>& local_devices() const override { return devices_; }
  int num_workers() const override { return group_->num_processes(); }
  int worker_index() const override { return group_->process_rank(); }
  bool is_chief() const override { return group_->process_rank() == 0; }
  std::string worker_name(int index) const override;
  void report_failure(const std::string& reason) override;
  // Whether the collectives between the worker processes go through shared memory (every
  // worker's address names one host, CommunicationOptions kAuto, and the segment could be
  // mapped) rather than the backend's transport over the network.
  bool workers_share_memory() const override { return group_->cross_process().completes_in_call(); }

  void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) override;
  void all_reduce_across_workers(std::vector<at::Tensor>& tensors, ReduceOp op) const override;
  at::Tensor all_gather_across_workers(const at::Tensor& local) const override;
  CommunicationCounters communication_counters() const override { return counters_->snapshot(); }
  std::shared_ptr<CommunicationHook> communication_hook() const override {
    return options_.communication_hook;
  }

  std::shared_ptr<DistributedVariables> create_variables(
      std::shared_ptr<torch::nn::Module> primary) override;
  void apply_gradients(DistributedVariables& variables,
                       torch::optim::Optimizer& optimizer) override;

 private:
  // The parts (the reduction and the step plan), once the group exists. `overlap_with_backward`:
  // whether plain packs go out during backward.
  void choose_parts(bool overlap_with_backward, bool share_variables_on_host);
  // The overlapped reduction's: at stage 3 every parameter is a pack of its own, so that a
  // pack is released as soon as its layer's backward has run.
  int64_t bytes_per_pack() const {
    return options_.sharding == Sharding::kParameters ? 1 : options_.bytes_per_pack;
  }
  MirroredVariables& mirrored(DistributedVariables& variables) const;
  // The primary's copies, one per other local replica, sharing its parameters' storage.
  std::vector<std::shared_ptr<torch::nn::Module>> mirror(
      std::shared_ptr<torch::nn::Module> primary);
  // Makes a freshly mirrored model identical on every worker (after checking that every
  // worker built the same model).
  void synchronize_initial_values(MirroredVariables& variables);
  void check_same_model(const torch::nn::Module& model);
  // Buffers (BatchNorm statistics) are per replica; keep them in sync as their mean, as
  // tf.distribute does for ON_READ variables aggregated with MEAN: over the local copies, then
  // over the workers. A collective of every local replica.
  void sync_buffers(MirroredVariables& variables, int replica);

  std::string name_;
  MirroredOptions options_;
  std::vector<DeviceName> devices_;
  // What the cross-process communicator was handed (made before it).
  std::shared_ptr<collective::ByteCounters> counters_ =
      std::make_shared<collective::ByteCounters>();
  std::shared_ptr<collective::HierarchicalGroup> group_;
  std::vector<std::unique_ptr<collective::Communicator>> members_;  // one per local replica
  // The parts, chosen once from the options: how gradients are reduced, and the optimizer
  // step plan each model gets.
  std::unique_ptr<GradientReduction> reduction_;
  MakeStepPlan make_step_plan_;
  // A sharded strategy's chunks of the gradient sums and parameters, per model.
  std::shared_ptr<ShardingState> sharding_state_ = std::make_shared<ShardingState>();
  std::unique_ptr<ReplicaThreads> threads_;
  std::mutex run_mu_;
  int models_created_ = 0;  // checked for sameness between the workers
  int models_placed_ = 0;   // GradientPack::model and StepPlanInputs::model of the next
};

// The replica devices of `options` (one logical CPU device per core when none are listed).
std::vector<DeviceName> resolve_devices(const MirroredOptions& options);

}  // namespace dist
