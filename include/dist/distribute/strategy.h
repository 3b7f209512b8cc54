// Strategy: how a training loop is distributed. Change the strategy object, keep the loop.
//
//   dist::Strategy strategy = dist::OneDeviceStrategy("cpu:0");   // or MirroredStrategy(), ...
//   auto model = strategy.mirror(make_tutorial_cnn());             // "created in scope"
//   auto optimizer = strategy.mirror_optimizer<torch::optim::Adam>(model, AdamOptions(1e-3));
//   auto train = strategy.experimental_distribute_dataset(ds.batch(global_batch));
//   for (const auto& batch : train.iterator(epoch)) {
//     auto losses = strategy.run([&](const dist::data::Element& b) {
//       auto loss = dist::compute_average_loss(loss_fn(b[1], model->forward(b[0])));
//       loss.backward();
//       optimizer->apply_gradients();
//       return loss.detach();
//     }, batch);
//     total += strategy.reduce(dist::ReduceOp::kSum, losses).item<double>();
//   }
//
// A Strategy is a handle: copies share one implementation, which must outlive nothing in
// particular (models and datasets made through it keep it alive). Methods are called from one
// thread (the cross-replica thread); run() fans out to replica threads itself.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/core/per_replica.h"
#include "dist/distribute/distributed_dataset.h"
#include "dist/distribute/input_context.h"
#include "dist/distribute/mirrored.h"
#include "dist/distribute/mirrored_optimizer.h"
#include "dist/distribute/replica_context.h"
#include "dist/distribute/strategy_extended.h"

namespace dist {

namespace detail {

// A run() argument as one replica sees it: PerReplica<T> -> its T, anything else unchanged.
template <class T>
struct ReplicaView {
  static const T& select(const T& value, int) { return value; }
  static int64_t global_batch_size(const T&) { return -1; }
};
template <class T>
struct ReplicaView<PerReplica<T>> {
  static const T& select(const PerReplica<T>& value, int replica) { return value[replica]; }
  static int64_t global_batch_size(const PerReplica<T>& value) { return value.global_batch_size(); }
};
template <class T>
using replica_view_t = std::remove_cv_t<
    std::remove_reference_t<decltype(ReplicaView<T>::select(std::declval<const T&>(), 0))>>;

}  // namespace detail

class Strategy {
 public:
  explicit Strategy(std::shared_ptr<StrategyExtended> extended);

  std::string name() const { return extended_->name(); }
  int num_replicas_in_sync() const { return extended_->num_replicas_in_sync(); }
  const std::vector<DeviceName>& local_devices() const { return extended_->local_devices(); }
  StrategyExtended& extended() const { return *extended_; }

  // The processes of the job (1 unless multi-worker), this one's index, and whether it is the
  // one that writes what is written once (checkpoints, summaries, the final weights).
  int num_workers() const { return extended_->num_workers(); }
  int worker_index() const { return extended_->worker_index(); }
  bool is_chief() const { return extended_->is_chief(); }

  // Before the first step of a multi-worker job: throws CollectiveError on every worker unless
  // all of them hold the chief's values of these named settings (StrategyExtended).
  void check_workers_agree(const std::vector<std::pair<std::string, std::string>>& settings) const {
    extended_->check_workers_agree(settings);
  }
  // This worker is failing for `reason`: the others stop at once naming it (StrategyExtended).
  void report_failure(const std::string& reason) const { extended_->report_failure(reason); }

  // Runs fn once per replica, in parallel, with PerReplica arguments replaced by the replica's
  // value and other arguments passed to all. Returns the replicas' results as PerReplica<R>
  // (or nothing when fn returns void).
  template <class Fn, class... Args>
  auto run(Fn&& fn, const Args&... args) const {
    using Result = std::invoke_result_t<Fn&, const detail::replica_view_t<Args>&...>;
    int64_t global_batch_size = -1;
    ((global_batch_size =
          std::max(global_batch_size, detail::ReplicaView<Args>::global_batch_size(args))),
     ...);
    if constexpr (std::is_void_v<Result>) {
      extended_->run_replicas(
          [&]([[maybe_unused]] int replica) {
            fn(detail::ReplicaView<Args>::select(args, replica)...);
          },
          global_batch_size);
    } else {
      std::vector<std::optional<Result>> results(
          static_cast<size_t>(extended_->num_local_replicas()));
      extended_->run_replicas(
          [&](int replica) {
            results[static_cast<size_t>(replica)].emplace(
                fn(detail::ReplicaView<Args>::select(args, replica)...));
          },
          global_batch_size);
      std::vector<Result> values;
      values.reserve(results.size());
      for (auto& r : results) values.push_back(std::move(*r));
      return PerReplica<Result>(std::move(values));
    }
  }

  // True on every worker when `local` is true on any worker (a collective under a
  // multi-worker strategy: every worker calls it at the same point). For decisions all
  // workers must take together, such as stopping on a signal one of them received.
  bool any_worker(bool local) const { return extended_->any_worker(local); }

  // Combines per-replica values into one (across workers too). With an axis, also reduces
  // along it: reduce(kMean, per_example_losses, 0) is the mean over the whole global batch.
  at::Tensor reduce(ReduceOp op, const PerReplica<at::Tensor>& value,
                    std::optional<int64_t> axis = std::nullopt) const;
  double reduce(ReduceOp op, const PerReplica<double>& value) const;
  std::map<std::string, at::Tensor> reduce(
      ReduceOp op, const PerReplica<std::map<std::string, at::Tensor>>& value) const;
  // Every replica's value concatenated along axis, in replica order.
  at::Tensor gather(const PerReplica<at::Tensor>& value, int64_t axis = 0) const;

  // This process's per-replica values.
  template <class T>
  const std::vector<T>& experimental_local_results(const PerReplica<T>& value) const {
    return value.values();
  }

  // Places a model's variables as the strategy does (one copy per replica for the mirrored
  // strategies): the equivalent of creating it inside tf.distribute's strategy.scope().
  template <class M>
  Mirrored<M> mirror(M module) const {
    return Mirrored<M>(extended_->create_variables(module.ptr()));
  }

  // Makes an optimizer of type Opt (torch::optim::Adam, SGD, ...; include its LibTorch
  // header) over a model made by mirror().
  template <class Opt, class M, class Options>
  std::shared_ptr<MirroredOptimizer> mirror_optimizer(const Mirrored<M>& model,
                                                      const Options& options) const {
    auto optimizer = std::make_unique<Opt>(model.variables().trainable_variables(), options);
    return std::make_shared<MirroredOptimizer>(model.shared_variables(), std::move(optimizer));
  }

  // A runner for a training loop's steps, as this strategy runs them (step_runner.h).
  std::unique_ptr<StepRunner> make_step_runner(TrainStep step) const {
    return extended_->make_step_runner(*this, std::move(step));
  }
  // What a loop must know of how this strategy runs steps (step_runner.h).
  StepSchedule step_schedule() const { return extended_->step_schedule(); }

  // Distributes a dataset of global batches across the replicas (distributed_dataset.h).
  DistributedDataset experimental_distribute_dataset(const data::Dataset& global_batches,
                                                     DistributeOptions options = {}) const;

  // Builds this process's input pipeline with fn; its elements are per-replica batches,
  // handed to the local replicas in turn (distributed_dataset.h). fn is called once.
  DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const InputContext&)>& fn) const;

 private:
  std::shared_ptr<StrategyExtended> extended_;
};

// The default strategy: one replica on the default device, no distribution (tf.distribute's
// default strategy). A loop written against Strategy runs under it unchanged.
Strategy get_default_strategy();

}  // namespace dist
