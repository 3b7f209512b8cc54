#include "dist/train/metric.h"

#include "dist/core/error.h"
#include "dist/distribute/replica_context.h"
#include "dist/distribute/strategy_extended.h"

namespace dist {

Metric::Metric(std::string name) : name_(std::move(name)), slots_(1, {0.0, 0.0}) {}

Metric::~Metric() = default;

std::pair<double, double> Metric::local_sums() const {
  double total = 0.0;
  double count = 0.0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [slot_total, slot_count] : slots_) {
    total += slot_total;
    count += slot_count;
  }
  return {total, count};
}

std::pair<double, double> Metric::global_sums() const {
  const auto local = local_sums();
  std::shared_ptr<const StrategyExtended> strategy;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    strategy = strategy_.lock();
  }
  if (!strategy || strategy->num_workers() == 1) return local;
  auto sums = strategy->sum_across_workers({local.first, local.second});
  return {sums[0], sums[1]};
}

double Metric::result() const {
  auto [total, count] = global_sums();
  return finalize(total, count);
}

std::pair<double, double> Metric::total_and_count() const { return global_sums(); }

void Metric::restore_state(double total, double count) {
  reset_state();
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.at(0) = {total, count};
}

double Metric::local_result() const {
  auto [total, count] = local_sums();
  return finalize(total, count);
}

void Metric::reset_state() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& slot : slots_) slot = {0.0, 0.0};
}

std::vector<std::pair<double, double>> Metric::local_states() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slots_;
}

void Metric::accumulate(double total, double count) {
  ReplicaContext* context = get_replica_context();
  int replica = context == nullptr ? 0 : context->replica_id_in_sync_group();
  DIST_INTERNAL_ASSERT(replica >= 0, "negative replica id ", replica);
  std::lock_guard<std::mutex> lock(mutex_);
  if (context != nullptr) {
    auto bound = strategy_.lock();
    DIST_CHECK_ARG(!bound || bound.get() == context->strategy(), "metric '", name_,
                   "' is updated under ", context->strategy()->describe(),
                   " but was first updated under another strategy object, ",
                   bound ? bound->describe() : "", "; use one metric object per strategy");
    if (!bound) strategy_ = context->shared_strategy();
  }
  if (static_cast<size_t>(replica) >= slots_.size()) slots_.resize(replica + 1, {0.0, 0.0});
  slots_[replica].first += total;
  slots_[replica].second += count;
}

double Metric::finalize(double total, double count) const {
  return count == 0.0 ? 0.0 : total / count;
}

StepSums metric_step_sums(std::vector<Metric*> metrics) {
  for (const Metric* m : metrics)
    DIST_CHECK_ARG(m != nullptr, "metric_step_sums: a metric is null");
  StepSums sums;
  sums.reset = [metrics] {
    for (Metric* m : metrics) m->reset_state();
  };
  sums.read = [metrics] {
    std::vector<double> values;
    for (const Metric* m : metrics) {
      const auto [total, count] = m->total_and_count();
      values.push_back(total);
      values.push_back(count);
    }
    return values;
  };
  sums.add = [metrics](const std::vector<double>& values) {
    DIST_CHECK(values.size() == 2 * metrics.size(), InternalError, "a step returned ",
               values.size(), " sums for ", metrics.size(), " metrics");
    for (size_t i = 0; i < metrics.size(); ++i) {
      const auto [total, count] = metrics[i]->total_and_count();
      metrics[i]->restore_state(total + values[2 * i], count + values[2 * i + 1]);
    }
  };
  return sums;
}

}  // namespace dist
