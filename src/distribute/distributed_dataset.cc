#include "dist/distribute/distributed_dataset.h"

#include "dist/distribute/strategy_extended.h"

namespace dist {

DistributedIterator::DistributedIterator(data::Iterator input,
                                         std::shared_ptr<const StrategyExtended> strategy)
    : input_(std::move(input)), strategy_(std::move(strategy)) {}

std::optional<PerReplica<data::Element>> DistributedIterator::next() {
  auto batch = input_.next();
  if (!batch) return std::nullopt;
  return strategy_->distribute_batch(*batch);
}

DistributedIterator::Cursor::Cursor(DistributedIterator* owner) : owner_(owner) {
  if (owner_ != nullptr) ++*this;
}

DistributedIterator::Cursor& DistributedIterator::Cursor::operator++() {
  current_ = owner_->next();
  if (!current_) owner_ = nullptr;
  return *this;
}

DistributedDataset::DistributedDataset(data::Dataset global_batches,
                                       std::shared_ptr<const StrategyExtended> strategy)
    : global_batches_(std::move(global_batches)), strategy_(std::move(strategy)) {}

DistributedIterator DistributedDataset::iterator(int64_t epoch) const {
  return DistributedIterator(global_batches_.iterator(epoch), strategy_);
}

DistributedIterator DistributedDataset::iterator_at(const data::IteratorPosition& position) const {
  return DistributedIterator(global_batches_.iterator_at(position), strategy_);
}

}  // namespace dist
