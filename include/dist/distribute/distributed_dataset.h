// DistributedDataset: a dataset of GLOBAL batches, handed out split across replicas.
//
// strategy.experimental_distribute_dataset(ds) takes a dataset whose elements are global
// batches; each step yields a PerReplica<Element> with one share per local replica
// (batch_split.h) that remembers the global batch size, so compute_average_loss can divide by
// the true size of every step, including a partial last batch.
//
// strategy.distribute_datasets_from_function(fn) instead takes a dataset of PER-REPLICA
// batches: each step hands the next batch to each local replica in turn. When the data runs
// out mid-step, the remaining replicas get empty batches (zero rows) and still take part;
// the step's global batch size is the sum of what the replicas got.
#pragma once

#include <memory>
#include <optional>

#include "dist/core/per_replica.h"
#include "dist/data/dataset.h"

namespace dist {

class StrategyExtended;

// Whether the input's elements are global batches to split or per-replica batches.
enum class InputKind { kGlobalBatches, kPerReplicaBatches };

class DistributedIterator {
 public:
  DistributedIterator(data::Iterator input, std::shared_ptr<const StrategyExtended> strategy,
                      InputKind kind = InputKind::kGlobalBatches);

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
  std::optional<PerReplica<data::Element>> next_per_replica();

  data::Iterator input_;
  std::shared_ptr<const StrategyExtended> strategy_;
  InputKind kind_;
};

class DistributedDataset {
 public:
  DistributedDataset(data::Dataset input, std::shared_ptr<const StrategyExtended> strategy,
                     InputKind kind = InputKind::kGlobalBatches);

  DistributedIterator iterator(int64_t epoch = 0) const;
  DistributedIterator iterator_at(const data::IteratorPosition& position) const;
  // Steps per epoch, or a negative tf.data cardinality constant.
  int64_t cardinality() const;
  // The input dataset (global or per-replica batches, see kind()).
  const data::Dataset& input() const { return input_; }
  InputKind kind() const { return kind_; }

 private:
  data::Dataset input_;
  std::shared_ptr<const StrategyExtended> strategy_;
  InputKind kind_;
};

}  // namespace dist
