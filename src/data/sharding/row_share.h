// A worker's rows of every global batch, read without producing the others: what lets kData
// sharding (every worker iterates the same pipeline, one device's global batches) decode only
// the examples its replicas train on.
//
// The global batch (the batch() nearest the output, with only prefetch or with_options above
// it) takes its rows from its input by position: rows [lo, hi) of each batch of g rows are
// read with next(), the others passed with skip(), which never calls a map's function. A
// parallel map right below the batch is told which elements will be skipped, so its threads
// do not decode them ahead. The batches hold the same rows they would hold whole, bit for bit;
// only the other workers' rows are missing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "data/sharding/replica_rows.h"
#include "dist/data/dataset.h"

namespace dist::data::detail {

class RowShare {
 public:
  // `replicas`: this worker's replicas, whose rows of each global batch it reads.
  RowShare(int64_t batch_size, int64_t input_rows, bool drop_remainder, ReplicaRows replicas);

  // The global batches there are (the last may be partial unless drop_remainder).
  int64_t batches() const;
  // The rows of global batch `batch` (0 past the end).
  int64_t rows_of_batch(int64_t batch) const;
  // This worker's rows [lo, hi) of a global batch of `rows`.
  std::pair<int64_t, int64_t> own_rows(int64_t rows) const { return replicas_.of(rows); }
  const ReplicaRows& replicas() const { return replicas_; }
  // The rows read with next() from a batch of g rows: the own rows, or, when there are none,
  // one row (an empty batch still needs the shapes of its components).
  std::pair<int64_t, int64_t> fetched_rows(int64_t rows) const;
  // Whether element `index` of the batch's input is read with next().
  bool fetches(int64_t index) const;
  int64_t batch_size() const { return batch_size_; }

 private:
  int64_t batch_size_;
  int64_t input_rows_;
  bool drop_remainder_;
  ReplicaRows replicas_;
};

// The pipeline whose global batches hold only the rows of `replicas`, and the RowShare that
// says which they are; nullopt when the pipeline does not allow it (no global batch at the
// output, or its input's size is unknown: the last batch's size must be known in advance).
std::optional<std::pair<Dataset, std::shared_ptr<const RowShare>>> share_rows(
    const Dataset& dataset, ReplicaRows replicas);

}  // namespace dist::data::detail
