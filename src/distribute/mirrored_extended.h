// MirroredExtended: the implementation behind MirroredStrategy and CentralStorageStrategy,
// and the in-process half of MultiWorkerMirroredStrategy (which overrides the hooks marked
// "multi-worker hook"). See mirrored_strategy.cc for how a step runs.
#pragma once

#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/local_replica_group.h"
#include "dist/distribute/mirrored_strategy.h"
#include "distribute/overlapped_reducer.h"
#include "distribute/replica_threads.h"

namespace dist {

std::vector<DeviceName> resolve_devices(const MirroredOptions& options);
std::string describe_error(const std::exception_ptr& error);
std::vector<std::vector<size_t>> make_packs(const std::vector<at::Tensor>& params, int64_t bytes);

class MirroredExtended : public StrategyExtended,
                         public std::enable_shared_from_this<MirroredExtended> {
 public:
  MirroredExtended(std::string name, MirroredOptions options)
      : name_(std::move(name)), options_(std::move(options)), devices_(resolve_devices(options_)) {
    DIST_CHECK_ARG(options_.bytes_per_pack >= 1, "bytes_per_pack must be positive, got ",
                   options_.bytes_per_pack);
    DIST_CHECK_ARG(options_.collective_timeout.count() > 0,
                   "collective_timeout must be positive, got ", options_.collective_timeout.count(),
                   " ms");
    DIST_CHECK_ARG(options_.threads_per_replica >= 0, "threads_per_replica must be at least 0");
    const int replicas = static_cast<int>(devices_.size());
    const int threads = options_.threads_per_replica > 0
                            ? options_.threads_per_replica
                            : std::max(1, available_cores() / replicas);
    group_ = std::make_unique<collective::LocalReplicaGroup>(replicas, options_.cross_device_ops,
                                                             options_.collective_timeout);
    threads_ = std::make_unique<ReplicaThreads>(replicas, threads);
  }

  std::string name() const override { return name_; }
  int num_replicas_in_sync() const override {
    return static_cast<int>(devices_.size()) * num_workers();
  }
  int first_replica_id() const override { return worker_rank() * num_local_replicas(); }
  const std::vector<DeviceName>& local_devices() const override { return devices_; }

  void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) override {
    DIST_CHECK_ARG(get_replica_context() == nullptr,
                   "strategy.run() was called inside a step function; call it from "
                   "cross-replica code (outside run())");
    std::lock_guard<std::mutex> one_run_at_a_time(run_mu_);
    group_->reset();
    auto errors = threads_->run(
        [&](int replica) {
          ReplicaContext context(group_.get(), first_replica_id() + replica, global_batch_size,
                                 replica);
          ReplicaContextScope scope(&context);
          body(replica);
        },
        [&](int replica, std::exception_ptr error) {
          group_->abort(detail::concat("replica ", replica, " (", devices_[replica].to_string(),
                                       ") failed: ", describe_error(error)));
        });
    settle_reducers();
    // Rethrow the root cause: the first replica's own error, not the CollectiveErrors the
    // others got because it stopped taking part.
    std::exception_ptr first_collective;
    for (const auto& error : errors) {
      if (!error) continue;
      try {
        std::rethrow_exception(error);
      } catch (const CollectiveError&) {
        if (!first_collective) first_collective = error;
      } catch (...) {
        throw;
      }
    }
    if (first_collective) std::rethrow_exception(first_collective);
  }

  std::shared_ptr<detail::MirroredVariables> mirror_module(
      std::shared_ptr<torch::nn::Module> primary) override {
    DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
    auto variables = std::make_shared<detail::MirroredVariables>();
    variables->strategy = shared_from_this();
    variables->replicas.push_back(primary);
    const auto primary_params = primary->parameters();
    for (size_t r = 1; r < devices_.size(); ++r) {
      std::shared_ptr<torch::nn::Module> copy;
      try {
        copy = primary->clone();
      } catch (const c10::Error& e) {
        throw InvalidArgument(detail::concat(
            "mirror: cannot copy module ", primary->name(), " for replica ", r,
            ": derive it from torch::nn::Cloneable<", primary->name(),
            "> (or build it from torch::nn::Sequential) so each replica can get a copy"));
      }
      // Share the parameters' storage with the primary; each copy keeps its own leaf
      // variables (so its own gradients) and its own buffers. Match by position: a clone
      // may name its submodules differently (Sequential's clone numbers them).
      auto copy_params = copy->parameters();
      DIST_INTERNAL_ASSERT(copy_params.size() == primary_params.size(), "clone of ",
                           primary->name(), " has a different parameter count");
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < copy_params.size(); ++i) copy_params[i].set_data(primary_params[i]);
      variables->replicas.push_back(std::move(copy));
    }
    synchronize_initial_values(*variables);
    if (overlap_with_backward()) attach_reducer(*variables);
    return variables;
  }

  void apply_gradients(detail::MirroredVariables& variables,
                       torch::optim::Optimizer& optimizer) override {
    DIST_CHECK_ARG(variables.replicas.size() == devices_.size(), "apply_gradients: the model has ",
                   variables.replicas.size(), " copies but this strategy runs ", devices_.size(),
                   " replicas; make the model and optimizer with the strategy that runs them");
    ReplicaContext* context = get_replica_context();
    if (context == nullptr) return apply_in_cross_replica_context(variables, optimizer);
    DIST_CHECK_ARG(context->group() == group_.get(),
                   "apply_gradients was called inside run() of a different strategy than the "
                   "one that made this optimizer");
    const int replica = context->local_replica_id();
    auto params = variables.replicas[static_cast<size_t>(replica)]->parameters();
    if (auto* reducer = static_cast<OverlappedReducer*>(variables.strategy_state.get())) {
      reducer->finish_backward(replica);
      group_->barrier(replica, "apply_gradients", [&] {
        reducer->write_results();
        update(variables, optimizer);
      });
      detail::clear_gradients(params);
      return;
    }
    std::vector<at::Tensor> grads;
    for (auto& p : params) {
      // An empty replica or an unused parameter has no gradient; it still takes part.
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    auto packs = make_packs(grads, options_.bytes_per_pack);
    for (size_t k = 0; k < packs.size(); ++k) {
      std::vector<at::Tensor> pack;
      for (size_t i : packs[k]) pack.push_back(grads[i]);
      const bool last = k + 1 == packs.size();
      // After the in-process reduction of each pack, the last replica to arrive combines it
      // across workers; after the last pack it also applies the update.
      group_->all_reduce_into_first(replica, ReduceOp::kSum, pack, [&, last] {
        // Replica 0's gradients exist once it reached the first pack; list them once a step.
        if (k == 0) first_grads_ = first_copy_grads(variables);
        std::vector<at::Tensor> reduced;
        for (size_t i : packs[k]) reduced.push_back(first_grads_[i]);
        reduce_pack_across_workers(reduced);
        if (last) update(variables, optimizer);
      });
    }
    if (packs.empty())
      group_->barrier(replica, "apply_gradients", [&] { update(variables, optimizer); });
    detail::clear_gradients(params);
  }

 protected:
  // Multi-worker hooks; the in-process strategies have one worker and nothing to do.
  virtual int worker_rank() const { return 0; }
  virtual int num_workers() const { return 1; }
  // Combines a pack of gradients (already reduced in process, in replica 0's tensors)
  // across workers, in place.
  virtual void reduce_pack_across_workers(std::vector<at::Tensor>& pack) {}
  // Makes a freshly mirrored model identical on every worker.
  virtual void synchronize_initial_values(detail::MirroredVariables& variables) {}
  // Whether each pack's cross-worker reduction starts during backward (OverlappedReducer).
  // In process alone it would not pay: the replica threads reduce in parallel at the end.
  virtual bool overlap_with_backward() const { return false; }

  void attach_reducer(detail::MirroredVariables& variables) {
    auto reducer = std::make_shared<OverlappedReducer>(
        variables, group_.get(),
        make_packs(variables.replicas[0]->parameters(), options_.bytes_per_pack),
        [this](at::Tensor& flat) {
          std::vector<at::Tensor> one{flat};
          reduce_pack_across_workers(one);
        });
    std::lock_guard<std::mutex> lock(reducers_mu_);
    reducers_.push_back(reducer);
    variables.strategy_state = std::move(reducer);
  }

  // Before a cross-worker collective other than a gradient pack (see OrderedCommunicator).
  void complete_reducer_steps() {
    std::lock_guard<std::mutex> lock(reducers_mu_);
    for (const auto& weak : reducers_)
      if (auto reducer = weak.lock()) reducer->complete_step();
  }

  // A step whose backward ran but that never called apply_gradients leaves packs in flight;
  // finish them (every worker sent the same ones) and forget the step.
  void settle_reducers() {
    std::lock_guard<std::mutex> lock(reducers_mu_);
    for (auto it = reducers_.begin(); it != reducers_.end();) {
      if (auto reducer = it->lock()) {
        reducer->settle();
        ++it;
      } else {
        it = reducers_.erase(it);
      }
    }
  }

  collective::LocalReplicaGroup& group() { return *group_; }
  const MirroredOptions& options() const { return options_; }

  // Runs once per step, in one replica thread while the others wait: one optimizer step on
  // the primary's parameters (shared by all copies), then the buffers are averaged. It runs
  // with that replica's share of the cores: changing the thread count per step costs more
  // than it saves (at::set_num_threads rebuilds thread pools).
  void update(detail::MirroredVariables& variables, torch::optim::Optimizer& optimizer) {
    optimizer.step();
    average_buffers(variables);
  }

  // Buffers (BatchNorm statistics) are per replica; keep them in sync as their mean, as
  // tf.distribute does for ON_READ variables aggregated with MEAN: over the local copies, then
  // over the workers.
  void average_buffers(detail::MirroredVariables& variables) {
    std::vector<std::vector<at::Tensor>> buffers;
    for (const auto& replica : variables.replicas) buffers.push_back(replica->buffers());
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> means;  // of the floating-point buffers, in order
    std::vector<size_t> positions;
    for (size_t b = 0; b < buffers[0].size(); ++b) {
      if (!at::isFloatingType(buffers[0][b].scalar_type())) continue;
      at::Tensor mean = buffers[0][b].clone();
      for (size_t r = 1; r < buffers.size(); ++r) mean.add_(buffers[r][b]);
      mean.div_(static_cast<double>(buffers.size()));
      means.push_back(std::move(mean));
      positions.push_back(b);
    }
    if (!means.empty()) average_buffers_across_workers(means);
    for (size_t i = 0; i < means.size(); ++i)
      for (auto& replica : buffers) replica[positions[i]].copy_(means[i]);
  }

  // The mean over workers of each worker's buffer means, in place (MultiWorkerMirroredStrategy;
  // a collective every worker makes at the same step). One process has nothing to do.
  virtual void average_buffers_across_workers(std::vector<at::Tensor>& means) { (void)means; }

  static std::vector<at::Tensor> first_copy_grads(detail::MirroredVariables& variables) {
    std::vector<at::Tensor> grads;
    for (const auto& p : variables.replicas[0]->parameters()) grads.push_back(p.grad());
    return grads;
  }

  // apply_gradients called after run() in cross-replica code: the gradients of every copy are
  // summed into the primary's here, in replica order.
  void apply_in_cross_replica_context(detail::MirroredVariables& variables,
                                      torch::optim::Optimizer& optimizer) {
    torch::NoGradGuard no_grad;
    auto primary = variables.replicas[0]->parameters();
    for (size_t r = 1; r < variables.replicas.size(); ++r) {
      auto params = variables.replicas[r]->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (!params[i].grad().defined()) continue;
        if (!primary[i].grad().defined()) primary[i].mutable_grad() = at::zeros_like(primary[i]);
        primary[i].mutable_grad().add_(params[i].grad());
      }
    }
    std::vector<at::Tensor> grads;
    for (auto& p : primary) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    reduce_pack_across_workers(grads);
    optimizer.step();
    average_buffers(variables);
    for (auto& replica : variables.replicas) detail::clear_gradients(replica->parameters());
  }

  std::string name_;
  MirroredOptions options_;
  std::vector<DeviceName> devices_;
  std::unique_ptr<collective::LocalReplicaGroup> group_;
  std::unique_ptr<ReplicaThreads> threads_;
  std::mutex run_mu_;
  std::vector<at::Tensor> first_grads_;  // only touched in barrier completions (serialized)
  std::mutex reducers_mu_;
  std::vector<std::weak_ptr<OverlappedReducer>> reducers_;
};

}  // namespace dist
