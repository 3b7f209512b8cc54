// ClusterCoordinator: the public face of the coordinator machinery in src/ps/coordinator.cc.
#include "dist/distribute/cluster_coordinator.h"

#include "dist/core/error.h"
#include "ps/coordinator.h"

namespace dist {
namespace {

detail::RemoteState& state_of(const std::shared_ptr<detail::RemoteState>& state) {
  DIST_CHECK_ARG(state != nullptr,
                 "RemoteValue: this value was not returned by ClusterCoordinator::schedule");
  return *state;
}

ParameterServerExtended& checked_parameter_server_extended(const Strategy& strategy) {
  auto* extended = dynamic_cast<ParameterServerExtended*>(&strategy.extended());
  DIST_CHECK_ARG(extended != nullptr, "ClusterCoordinator: the strategy is '", strategy.name(),
                 "'; a coordinator schedules steps of a ParameterServerStrategy only");
  return *extended;
}

}  // namespace

bool RemoteValue::is_ready() const {
  auto& state = state_of(state_);
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.ready;
}

std::map<std::string, at::Tensor> RemoteValue::fetch_dict() const {
  auto& state = state_of(state_);
  state.wait();
  if (state.error) std::rethrow_exception(state.error);
  std::map<std::string, at::Tensor> values;
  for (const auto& [key, value] : state.results) values[key] = value;
  return values;
}

at::Tensor RemoteValue::fetch() const {
  auto& state = state_of(state_);
  state.wait();
  if (state.error) std::rethrow_exception(state.error);
  DIST_CHECK_ARG(state.results.size() == 1 && state.results[0].first.empty(),
                 "RemoteValue::fetch: the step returned a dictionary of ", state.results.size(),
                 " tensors; use fetch_dict()");
  return state.results[0].second;
}

data::Element ScheduledCall::next() {
  DIST_CHECK_ARG(next_ != nullptr, "ScheduledCall::next: not a call scheduled by a coordinator");
  return next_();
}

ClusterCoordinator::ClusterCoordinator(Strategy strategy) {
  auto& extended = checked_parameter_server_extended(strategy);
  impl_ = std::make_unique<detail::CoordinatorImpl>(std::move(strategy), extended);
}

ClusterCoordinator::~ClusterCoordinator() = default;

namespace {

void register_step(detail::StepRegistry& registry, const std::string& name,
                   detail::StepRegistry::Function function) {
  DIST_CHECK_ARG(!name.empty(), "ClusterCoordinator::register_function: the name is empty");
  std::lock_guard<std::mutex> lock(registry.mutex);
  DIST_CHECK_ARG(registry.functions.count(name) == 0,
                 "ClusterCoordinator::register_function: a step function '", name,
                 "' is registered already; give each its own name");
  registry.functions[name] = std::move(function);
}

}  // namespace

void ClusterCoordinator::register_function(const std::string& name, TensorFunction function) {
  DIST_CHECK_ARG(function != nullptr, "register_function('", name, "'): the function is empty");
  register_step(impl_->registry(), name, [function](ScheduledCall& call) {
    return detail::StepRegistry::Results{{"", function(call)}};
  });
}

void ClusterCoordinator::register_function(const std::string& name, DictFunction function) {
  DIST_CHECK_ARG(function != nullptr, "register_function('", name, "'): the function is empty");
  register_step(impl_->registry(), name, [function](ScheduledCall& call) {
    detail::StepRegistry::Results results;
    for (auto& [key, value] : function(call)) {
      DIST_CHECK_ARG(!key.empty(), "step: a result's key is empty; name every result");
      results.emplace_back(key, value);
    }
    return results;
  });
}

PerWorkerDataset ClusterCoordinator::create_per_worker_dataset(
    std::function<data::Dataset(const InputContext&)> dataset_fn) {
  DIST_CHECK_ARG(dataset_fn != nullptr, "create_per_worker_dataset: the function is empty");
  PerWorkerDataset dataset;
  dataset.id_ = impl_->add_dataset(std::move(dataset_fn));
  return dataset;
}

int ClusterCoordinator::serve() { return impl_->serve(); }

RemoteValue ClusterCoordinator::schedule(const std::string& function,
                                         PerWorkerDataset::Iterator iterator,
                                         std::vector<at::Tensor> arguments) {
  return impl_->schedule(function, iterator.dataset, iterator.epoch, std::move(arguments));
}

void ClusterCoordinator::join() { impl_->join(); }
bool ClusterCoordinator::done() { return impl_->done(); }
void ClusterCoordinator::shutdown() { impl_->shutdown(); }

}  // namespace dist
