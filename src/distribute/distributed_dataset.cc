#include "dist/distribute/distributed_dataset.h"

#include "dist/core/error.h"
#include "dist/distribute/strategy_extended.h"

namespace dist {

DistributedIterator::DistributedIterator(data::Iterator input,
                                         std::shared_ptr<const StrategyExtended> strategy,
                                         InputKind kind)
    : input_(std::move(input)), strategy_(std::move(strategy)), kind_(kind) {}

std::optional<PerReplica<data::Element>> DistributedIterator::next() {
  if (kind_ == InputKind::kPerReplicaBatches) return next_per_replica();
  auto batch = input_.next();
  if (!batch) return std::nullopt;
  return strategy_->distribute_batch(*batch);
}

std::optional<PerReplica<data::Element>> DistributedIterator::next_per_replica() {
  const int replicas = strategy_->num_local_replicas();
  std::vector<data::Element> batches;
  int64_t global = 0;
  for (int r = 0; r < replicas; ++r) {
    auto batch = input_.next();
    if (!batch) break;
    DIST_CHECK_ARG(!batch->empty() && (*batch)[0].dim() > 0,
                   "a per-replica input pipeline "
                   "must yield batches (tensors with a batch dimension); add .batch(n)");
    global += (*batch)[0].size(0);
    batches.push_back(std::move(*batch));
  }
  if (batches.empty()) return std::nullopt;
  while (static_cast<int>(batches.size()) < replicas) {
    data::Element empty;
    for (const auto& t : batches.front()) empty.push_back(t.narrow(0, 0, 0));
    batches.push_back(std::move(empty));
  }
  return PerReplica<data::Element>(std::move(batches), global);
}

DistributedIterator::Cursor::Cursor(DistributedIterator* owner) : owner_(owner) {
  if (owner_ != nullptr) ++*this;
}

DistributedIterator::Cursor& DistributedIterator::Cursor::operator++() {
  current_ = owner_->next();
  if (!current_) owner_ = nullptr;
  return *this;
}

DistributedDataset::DistributedDataset(data::Dataset input,
                                       std::shared_ptr<const StrategyExtended> strategy,
                                       InputKind kind)
    : input_(std::move(input)), strategy_(std::move(strategy)), kind_(kind) {}

DistributedIterator DistributedDataset::iterator(int64_t epoch) const {
  return DistributedIterator(input_.iterator(epoch), strategy_, kind_);
}

DistributedIterator DistributedDataset::iterator_at(const data::IteratorPosition& position) const {
  return DistributedIterator(input_.iterator_at(position), strategy_, kind_);
}

int64_t DistributedDataset::cardinality() const {
  int64_t c = input_.cardinality();
  if (c < 0 || kind_ == InputKind::kGlobalBatches) return c;
  const int64_t replicas = strategy_->num_local_replicas();
  return (c + replicas - 1) / replicas;
}

}  // namespace dist
