// DistributedDataset: a dataset of GLOBAL batches, handed out split across replicas.
//
// strategy.experimental_distribute_dataset(ds) takes a dataset whose elements are global
// batches; each step yields a PerReplica<Element> with one share per local replica
// (batch_split.h) that remembers the global batch size, so compute_average_loss can divide by
// the true size of every step, including a partial last batch.
#pragma once

#include <memory>
#include <optional>

#include "dist/core/per_replica.h"
#include "dist/data/dataset.h"

namespace dist {

class StrategyExtended;

class DistributedIterator {
 public:
  DistributedIterator(data::Iterator input, std::shared_ptr<const StrategyExtended> strategy);

  // The next step's per-replica batches, or nullopt at the end of the epoch.
  std::optional<PerReplica<data::Element>> next();
  // Position in the global-batch dataset (save it to resume at this step).
  data::IteratorPosition position() const { return input_.position(); }

  class Cursor {
   public:
    explicit Cursor(DistributedIterator* owner);
    const PerReplica<data::Element>& operator*() const { return *current_; }
    Cursor& operator++();
    bool operator!=(const Cursor& other) const { return owner_ != other.owner_; }

   private:
    DistributedIterator* owner_;
    std::optional<PerReplica<data::Element>> current_;
  };
  Cursor begin() { return Cursor(this); }
  Cursor end() { return Cursor(nullptr); }

 private:
  data::Iterator input_;
  std::shared_ptr<const StrategyExtended> strategy_;
};

class DistributedDataset {
 public:
  DistributedDataset(data::Dataset global_batches, std::shared_ptr<const StrategyExtended> strategy);

  DistributedIterator iterator(int64_t epoch = 0) const;
  DistributedIterator iterator_at(const data::IteratorPosition& position) const;
  // Steps per epoch (cardinality of the global-batch dataset).
  int64_t cardinality() const { return global_batches_.cardinality(); }
  const data::Dataset& global_batches() const { return global_batches_; }

 private:
  data::Dataset global_batches_;
  std::shared_ptr<const StrategyExtended> strategy_;
};

}  // namespace dist
