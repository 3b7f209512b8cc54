#include "dist/distribute/distributed_dataset.h"

#include "data/sharding/file_shard.h"
#include "data/sharding/row_share.h"
#include "dist/core/error.h"
#include "dist/data/files.h"
#include "dist/distribute/strategy_extended.h"

namespace dist {

DistributedIterator::DistributedIterator(data::Iterator input,
                                         std::shared_ptr<const StrategyExtended> strategy,
                                         InputKind kind, DistributeOptions options,
                                         int64_t input_cardinality,
                                         std::shared_ptr<const data::detail::RowShare> row_share)
    : input_(std::move(input)),
      strategy_(std::move(strategy)),
      kind_(kind),
      options_(options),
      input_cardinality_(input_cardinality),
      row_share_(std::move(row_share)) {}

data::Element DistributedIterator::empty_like_last() const {
  DIST_CHECK_ARG(last_batch_.has_value(),
                 "this worker's input had no data at all while other workers still do; give "
                 "every worker at least one batch");
  data::Element empty;
  for (const auto& t : *last_batch_) empty.push_back(t.narrow(0, 0, 0));
  empty.set_names(last_batch_->shared_names());
  return empty;
}

std::vector<data::Element> DistributedIterator::split_own_rows(const data::Element& own,
                                                               int64_t rows) const {
  const data::detail::ReplicaRows& replicas = row_share_->replicas();
  const int64_t lo = replicas.of(rows).first;  // `own` starts at this row of the global batch
  std::vector<data::Element> shares;
  for (int r = 0; r < replicas.count; ++r) {
    const auto [begin, end] = replicas.replica(r).of(rows);
    data::Element share;
    for (const auto& t : own) share.push_back(t.narrow(0, begin - lo, end - begin));
    share.set_names(own.shared_names());  // each replica reads share["name"] too
    shares.push_back(std::move(share));
  }
  return shares;
}

std::vector<data::Element> DistributedIterator::local_shares(int64_t* local_examples,
                                                             bool* has_data, int64_t* global_rows) {
  const int replicas = strategy_->num_local_replicas();
  std::vector<data::Element> shares;
  *local_examples = 0;
  *global_rows = 0;
  if (kind_ == InputKind::kGlobalBatches) {
    // Under a row share the position counts global batches: the one about to be read.
    const int64_t rows = row_share_ ? row_share_->rows_of_batch(input_.position().elements) : 0;
    if (auto batch = input_.next()) {
      if (row_share_) {
        shares = split_own_rows(*batch, rows);
        *global_rows = rows;
      } else {
        shares = strategy_->distribute_batch(*batch, options_.auto_shard_policy).values();
        const at::Tensor& first = batch->at(0);
        *global_rows = first.dim() == 0 ? 0 : first.size(0);
      }
      last_batch_ = *batch;
    }
  } else {
    for (int r = 0; r < replicas; ++r) {
      auto batch = input_.next();
      if (!batch) break;
      DIST_CHECK_ARG(!batch->empty() && (*batch)[0].dim() > 0,
                     "a per-replica input pipeline must yield batches (tensors with a batch "
                     "dimension); add .batch(n)");
      last_batch_ = *batch;
      shares.push_back(std::move(*batch));
    }
  }
  *has_data = !shares.empty();
  for (const auto& share : shares) *local_examples += share.at(0).size(0);
  return shares;
}

std::optional<PerReplica<data::Element>> DistributedIterator::next() {
  int64_t local_examples = 0;
  bool has_data = false;
  int64_t global_rows = 0;
  auto shares = local_shares(&local_examples, &has_data, &global_rows);
  if (agreement_ == StepAgreement::kOncePerEpoch)
    return next_as_agreed(std::move(shares), has_data, global_rows);
  auto [anyone_has_data, global_examples] = strategy_->agree_step(has_data, local_examples);
  if (agreement_ == StepAgreement::kUndecided)
    agreement_ = agreed_for_the_epoch() ? StepAgreement::kOncePerEpoch : StepAgreement::kEveryStep;
  ++steps_;
  if (!anyone_has_data) return std::nullopt;
  while (static_cast<int>(shares.size()) < strategy_->num_local_replicas())
    shares.push_back(empty_like_last());
  return PerReplica<data::Element>(std::move(shares), global_examples);
}

bool DistributedIterator::agreed_for_the_epoch() {
  // One process has nothing to agree with; its agreement is free as it is.
  if (strategy_->num_workers() == 1) return false;
  const bool same_pipeline_everywhere =
      kind_ == InputKind::kGlobalBatches && (options_.auto_shard_policy == AutoShardPolicy::kData ||
                                             options_.auto_shard_policy == AutoShardPolicy::kAuto);
  const bool known = input_cardinality_ >= 0 || input_cardinality_ == data::kInfiniteCardinality;
  // An input that cannot agree in advance says "unknown", which agrees with nothing.
  const int64_t mine =
      same_pipeline_everywhere && known ? input_cardinality_ : data::kUnknownCardinality;
  // Every worker's value is the same when its maximum is minus the maximum of its negation.
  std::vector<at::Tensor> extremes{at::tensor({mine, -mine}, at::kLong)};
  strategy_->all_reduce_across_workers(extremes, ReduceOp::kMax);
  return mine != data::kUnknownCardinality &&
         extremes[0][0].item<int64_t>() == -extremes[0][1].item<int64_t>();
}

std::optional<PerReplica<data::Element>> DistributedIterator::next_as_agreed(
    std::vector<data::Element> shares, bool has_data, int64_t global_rows) {
  const bool endless = input_cardinality_ == data::kInfiniteCardinality;
  const bool expected = endless || steps_ < input_cardinality_;
  DIST_CHECK(has_data == expected, DataError, "worker ", strategy_->worker_index(), "'s input ",
             has_data ? "yielded more than" : "ended before", " the ", input_cardinality_,
             " batches its cardinality promised (every worker agreed on that number at the "
             "epoch's first step and stopped agreeing before each step): a dataset node reports "
             "a wrong cardinality; its other workers fail in their next collective");
  ++steps_;
  if (!has_data) return std::nullopt;
  // Every worker read this same global batch (or its rows of it) and keeps its replicas' rows.
  return PerReplica<data::Element>(std::move(shares), global_rows);
}

DistributedIterator::Cursor::Cursor(DistributedIterator* owner) : owner_(owner) {
  if (owner_ != nullptr) ++*this;
}

DistributedIterator::Cursor& DistributedIterator::Cursor::operator++() {
  current_ = owner_->next();
  if (!current_) owner_ = nullptr;
  return *this;
}

namespace {

// The policy asked for (DistributeOptions, else the dataset's options), with kAuto resolved as
// tf.data resolves it: by file where the pipeline reads files, else by data.
AutoShardPolicy resolved_policy(const data::Dataset& input, AutoShardPolicy policy) {
  if (policy == AutoShardPolicy::kAuto)
    policy = input.options().auto_shard_policy.value_or(AutoShardPolicy::kAuto);
  if (policy != AutoShardPolicy::kAuto) return policy;
  return data::source_file_count(input) >= 0 ? AutoShardPolicy::kFile : AutoShardPolicy::kData;
}

}  // namespace

DistributedDataset::DistributedDataset(data::Dataset input,
                                       std::shared_ptr<const StrategyExtended> strategy,
                                       InputKind kind, DistributeOptions options)
    : input_(std::move(input)), strategy_(std::move(strategy)), kind_(kind), options_(options) {
  if (kind_ != InputKind::kGlobalBatches) return;
  options_.auto_shard_policy = resolved_policy(input_, options_.auto_shard_policy);
  const int workers = strategy_->num_workers();
  if (options_.auto_shard_policy == AutoShardPolicy::kFile && workers > 1)
    input_ = data::detail::divide_global_batch(
        data::shard_files(input_, workers, strategy_->worker_index()), workers);
  if (options_.auto_shard_policy == AutoShardPolicy::kData && workers > 1) {
    // Every worker iterates the same global batches, but produces (decodes) only its replicas'
    // rows of them, where the pipeline allows it (data/sharding/row_share.h).
    const data::detail::ReplicaRows replicas{strategy_->first_replica_id(),
                                             strategy_->num_local_replicas(),
                                             strategy_->num_replicas_in_sync()};
    if (auto shared = data::detail::share_rows(input_, replicas)) {
      input_ = std::move(shared->first);
      row_share_ = std::move(shared->second);
    }
  }
}

DistributedIterator DistributedDataset::iterator(int64_t epoch) const {
  return DistributedIterator(input_.iterator(epoch), strategy_, kind_, options_,
                             input_.cardinality(), row_share_);
}

DistributedIterator DistributedDataset::iterator_at(const data::IteratorPosition& position) const {
  if (options_.auto_shard_policy == AutoShardPolicy::kFile && strategy_->num_workers() > 1) {
    // The position counts steps; a worker whose files ran out before that step has fewer
    // batches, and is past its end there (it takes part with empty batches).
    data::Iterator it = input_.iterator(position.epoch);
    it.skip(position.elements);
    return DistributedIterator(std::move(it), strategy_, kind_, options_);
  }
  return DistributedIterator(input_.iterator_at(position), strategy_, kind_, options_,
                             data::kUnknownCardinality, row_share_);
}

int64_t DistributedDataset::cardinality() const {
  int64_t c = input_.cardinality();
  if (c < 0 || kind_ == InputKind::kGlobalBatches) return c;
  const int64_t replicas = strategy_->num_local_replicas();
  return (c + replicas - 1) / replicas;
}

}  // namespace dist
