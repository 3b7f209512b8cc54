// ClusterCoordinator: schedules step functions on the workers of a ParameterServerStrategy
// job (tf.distribute.coordinator.ClusterCoordinator).
//
// C++ cannot ship a closure to another process, so a step function is registered by name on
// every task (the same binary runs everywhere) and scheduled by name; the coordinator hands
// each scheduled call to an idle worker. A worker that is lost has its call scheduled again on
// another (at least once); one that comes back gets work again.
//
//   coordinator.register_function("train_step", [&](dist::ScheduledCall& call) {
//     auto losses = strategy.run([&](const dist::data::Element& b) { ... }, call.next());
//     return strategy.reduce(dist::ReduceOp::kSum, losses);
//   });
//   auto dataset = coordinator.create_per_worker_dataset([](const dist::InputContext& c) {...});
//   if (!strategy.is_chief()) return coordinator.serve();
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     auto iterator = dataset.iterator(epoch);
//     std::vector<dist::RemoteValue> losses;
//     for (int i = 0; i < steps; ++i) losses.push_back(coordinator.schedule("train_step",
//     iterator)); coordinator.join();
//   }
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/data/dataset.h"
#include "dist/distribute/input_context.h"
#include "dist/distribute/strategy.h"

namespace dist {

namespace detail {
struct RemoteState;
class CoordinatorImpl;
struct ScheduledCallAccess;
}  // namespace detail

// The result of a scheduled call, available once a worker has run it.
class ClusterCoordinator;

class RemoteValue {
 public:
  RemoteValue() = default;
  // Whether the call has finished (with a result or an error).
  bool is_ready() const;
  // Waits for the call; rethrows its error. A dictionary result is an error here.
  at::Tensor fetch() const;
  // Waits; the result of a function returning a dictionary of tensors.
  std::map<std::string, at::Tensor> fetch_dict() const;

 private:
  friend class detail::CoordinatorImpl;
  std::shared_ptr<detail::RemoteState> state_;
};

// The worker's side of a scheduled call.
class ScheduledCall {
 public:
  // The next element of the worker's iterator over the per-worker dataset it was scheduled
  // with. OutOfRange (the call fails with it, and is not retried) when it is exhausted.
  data::Element next();
  // The tensors given to schedule().
  const std::vector<at::Tensor>& arguments() const { return arguments_; }
  int worker_index() const { return worker_index_; }

 private:
  friend struct detail::ScheduledCallAccess;
  std::function<data::Element()> next_;
  std::vector<at::Tensor> arguments_;
  int worker_index_ = 0;
};

// A dataset made on each worker by the function given to create_per_worker_dataset.
class PerWorkerDataset {
 public:
  struct Iterator {
    int64_t dataset = -1;
    int64_t epoch = 0;
  };
  // The iterators of pass `epoch` (each worker makes its own on first use).
  Iterator iterator(int64_t epoch = 0) const { return {id_, epoch}; }

 private:
  friend class ClusterCoordinator;
  int64_t id_ = -1;
};

class ClusterCoordinator {
 public:
  using TensorFunction = std::function<at::Tensor(ScheduledCall&)>;
  using DictFunction = std::function<std::map<std::string, at::Tensor>(ScheduledCall&)>;

  // `strategy` must be a ParameterServerStrategy (InvalidArgument otherwise).
  explicit ClusterCoordinator(Strategy strategy);
  ~ClusterCoordinator();

  // On every task, in the same order: InvalidArgument if `name` is taken.
  void register_function(const std::string& name, TensorFunction function);
  void register_function(const std::string& name, DictFunction function);
  PerWorkerDataset create_per_worker_dataset(
      std::function<data::Dataset(const InputContext&)> dataset_fn);

  // On ps and worker tasks: serve until the coordinator shuts the job down (returns 0), has
  // been silent for the strategy's coordinator_timeout (returns 3), or a PreemptionWatcher
  // (dist/train/preemption.h) catches SIGTERM or SIGINT (returns 4, within 100 ms). On the
  // chief: InvalidArgument.
  int serve();

  // On the chief: runs `function` on an idle worker, with `iterator` (if any) and `arguments`.
  RemoteValue schedule(const std::string& function, PerWorkerDataset::Iterator iterator = {},
                       std::vector<at::Tensor> arguments = {});
  // Waits for every scheduled call; rethrows the first error of one that cannot be retried.
  void join();
  // Whether every scheduled call has finished (rethrows like join()).
  bool done();
  // Tells every ps and worker task to exit; the destructor does it too.
  void shutdown();

 private:
  std::unique_ptr<detail::CoordinatorImpl> impl_;
};

}  // namespace dist
