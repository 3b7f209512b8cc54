// How ParameterServerStrategy splits a variable into shards along its first dimension, as
// tf.distribute.experimental.partitioners do. The shards go to the ps tasks round-robin; a
// table's lookup then asks each ps task for its rows only.
//
//   dist::ParameterServerOptions options;
//   options.partitioner = dist::Partitioner::min_size(/*min_shard_bytes=*/256 << 10, /*max=*/2);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

namespace dist {

class Partitioner {
 public:
  // One shard per variable (the default): every variable lives whole on one ps task.
  Partitioner() = default;
  static Partitioner none() { return Partitioner(); }
  // `shards` shards (fewer if the first dimension has fewer rows). InvalidArgument if < 1.
  static Partitioner fixed_shards(int shards);
  // As many shards as keep each at least `min_shard_bytes`, at most `max_shards` (TF's
  // MinSizePartitioner; its defaults).
  static Partitioner min_size(int64_t min_shard_bytes = 256 << 10, int max_shards = 1);
  // As few shards as keep each at most `max_shard_bytes`, at most `max_shards` if > 0 (TF's
  // MaxSizePartitioner).
  static Partitioner max_size(int64_t max_shard_bytes, int max_shards = 0);

  // The number of shards for a variable of this shape and dtype (1 for a scalar).
  int num_shards(c10::IntArrayRef shape, c10::ScalarType dtype) const;
  // The rows of each shard: the first (rows % shards) shards get one row more, as TF splits.
  static std::vector<int64_t> shard_rows(int64_t rows, int shards);

  std::string description() const;

 private:
  enum class Kind { kNone, kFixed, kMinSize, kMaxSize };
  Kind kind_ = Kind::kNone;
  int shards_ = 1;  // fixed: the count; min/max size: the most shards (0: no limit)
  int64_t bytes_ = 0;
};

}  // namespace dist
