// Which rows of a global batch a replica reads: the one place of the split's arithmetic.
//
// A global batch of B rows over R replicas: replica r reads B/R rows, plus one more if
// r < B % R, taken in order (split_sizes, include/dist/distribute/batch_split.h, states it for
// users). So replica r starts at row r * (B/R) + min(r, B % R), and replicas [a, b) read rows
// [start(a), start(b)). split_sizes, a worker's rows under a row share (row_share.h) and the
// split of those rows among the worker's replicas (DistributedIterator) all read it here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace dist::data::detail {

// The first row of replica `replica` of `replicas` in a global batch of `rows`; `rows` for
// replica == replicas. Callers check 0 <= replica <= replicas, replicas >= 1 and rows >= 0.
inline int64_t first_row_of_replica(int64_t rows, int replica, int replicas) {
  return replica * (rows / replicas) + std::min<int64_t>(replica, rows % replicas);
}

// Replicas [first, first + count) of `all`: a worker's replicas, in the job's order.
struct ReplicaRows {
  int first = 0;
  int count = 1;
  int all = 1;

  // Their rows [lo, hi) of a global batch of `rows`.
  std::pair<int64_t, int64_t> of(int64_t rows) const {
    return {first_row_of_replica(rows, first, all), first_row_of_replica(rows, first + count, all)};
  }
  // Replica first + r alone.
  ReplicaRows replica(int r) const { return {first + r, 1, all}; }
};

}  // namespace dist::data::detail
