// PerReplica<T>: one value per replica of the current sync group, in replica order.
//
// strategy.run returns PerReplica values; a distributed dataset yields PerReplica batches.
// A PerReplica batch also remembers the true size of the global batch it was split from, so
// that compute_average_loss can divide by it exactly, even on a partial last batch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dist/core/error.h"

namespace dist {

template <class T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values, int64_t global_batch_size = -1)
      : values_(std::move(values)), global_batch_size_(global_batch_size) {}

  int size() const { return static_cast<int>(values_.size()); }

  // The value of replica `replica` (0-based, in sync-group order).
  const T& operator[](int replica) const {
    DIST_CHECK_ARG(replica >= 0 && replica < size(), "replica index ", replica,
                   " is out of range for a PerReplica value of ", size(), " replicas");
    return values_[static_cast<size_t>(replica)];
  }
  T& operator[](int replica) {
    return const_cast<T&>(static_cast<const PerReplica&>(*this)[replica]);
  }

  // All values, as tf.distribute's experimental_local_results.
  const std::vector<T>& values() const { return values_; }

  // Examples in the global batch these values were split from; -1 if not a batch.
  int64_t global_batch_size() const { return global_batch_size_; }

 private:
  std::vector<T> values_;
  int64_t global_batch_size_ = -1;
};

template <class T>
struct IsPerReplica : std::false_type {};
template <class T>
struct IsPerReplica<PerReplica<T>> : std::true_type {};

}  // namespace dist
