// DistributedDataset: a dataset handed out to the replicas, one PerReplica batch per step.
//
// strategy.experimental_distribute_dataset(ds) takes a dataset whose elements are GLOBAL
// batches; each step yields a PerReplica<Element> with this process's replicas' shares
// (batch_split.h). strategy.distribute_datasets_from_function(fn) takes a dataset of
// PER-REPLICA batches instead: each step hands the next batch to each local replica in turn.
//
// Every PerReplica batch remembers the true size of the step's global batch (across all
// workers), so compute_average_loss divides by it exactly, even on a partial last batch. When
// the data runs out unevenly, those without data get empty batches (zero rows) and still take
// part, until no one has data: the epoch ends everywhere at the same step. How the workers
// agree on that (each step, or once an epoch under kData): docs/design.md, "Round trips per
// step, and why they are counted".
#pragma once

#include <memory>
#include <optional>

#include "dist/core/per_replica.h"
#include "dist/data/auto_shard_policy.h"
#include "dist/data/dataset.h"

namespace dist {

class StrategyExtended;
namespace data::detail {
class RowShare;  // data/sharding/row_share.h
}

// Whether the input's elements are global batches to split or per-replica batches.
enum class InputKind { kGlobalBatches, kPerReplicaBatches };

struct DistributeOptions {
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::kAuto;
};

class DistributedIterator {
 public:
  // `input_cardinality`: the input's batches from here (data::Dataset::cardinality), or
  // kUnknownCardinality, which makes the workers agree before every step.
  // `row_share`: the input's global batches hold only this worker's rows (kData over a
  // pipeline whose batches' sizes are known: DistributedDataset arranges it); null: whole.
  DistributedIterator(data::Iterator input, std::shared_ptr<const StrategyExtended> strategy,
                      InputKind kind, DistributeOptions options,
                      int64_t input_cardinality = data::kUnknownCardinality,
                      std::shared_ptr<const data::detail::RowShare> row_share = nullptr);

  // The next step's per-replica batches, or nullopt at the end of the epoch (everywhere).
  std::optional<PerReplica<data::Element>> next();
  // Position in the input dataset (save it to resume at this step).
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
  // This process's shares for the step, empty when its input is exhausted; `global_rows`: the
  // rows of the global batch they come from (global batches only).
  std::vector<data::Element> local_shares(int64_t* local_examples, bool* has_data,
                                          int64_t* global_rows);
  // The local replicas' shares of a batch holding only this worker's rows of `rows`.
  std::vector<data::Element> split_own_rows(const data::Element& own, int64_t rows) const;
  data::Element empty_like_last() const;
  // At the first step: whether every worker's input is known to yield the same batches.
  bool agreed_for_the_epoch();
  // A step once the workers agreed for the epoch: no collective.
  std::optional<PerReplica<data::Element>> next_as_agreed(std::vector<data::Element> shares,
                                                          bool has_data, int64_t global_rows);

  enum class StepAgreement { kUndecided, kEveryStep, kOncePerEpoch };

  data::Iterator input_;
  std::shared_ptr<const StrategyExtended> strategy_;
  InputKind kind_;
  DistributeOptions options_;
  std::optional<data::Element> last_batch_;  // shapes for the empty batches of a finished input
  int64_t input_cardinality_;
  std::shared_ptr<const data::detail::RowShare> row_share_;
  StepAgreement agreement_ = StepAgreement::kUndecided;
  int64_t steps_ = 0;  // steps handed out
};

class DistributedDataset {
 public:
  DistributedDataset(data::Dataset input, std::shared_ptr<const StrategyExtended> strategy,
                     InputKind kind = InputKind::kGlobalBatches, DistributeOptions options = {});

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
  DistributeOptions options_;
  std::shared_ptr<const data::detail::RowShare> row_share_;  // see DistributedIterator
};

}  // namespace dist
