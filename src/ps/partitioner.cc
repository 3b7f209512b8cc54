#include "dist/distribute/partitioner.h"

#include <algorithm>

#include "dist/core/error.h"

namespace dist {

Partitioner Partitioner::fixed_shards(int shards) {
  DIST_CHECK_ARG(shards >= 1, "Partitioner::fixed_shards: ", shards,
                 " shards; a variable needs at least 1");
  Partitioner p;
  p.kind_ = Kind::kFixed;
  p.shards_ = shards;
  return p;
}

Partitioner Partitioner::min_size(int64_t min_shard_bytes, int max_shards) {
  DIST_CHECK_ARG(min_shard_bytes >= 1 && max_shards >= 1, "Partitioner::min_size: min_shard_bytes ",
                 min_shard_bytes, " and max_shards ", max_shards, " must both be at least 1");
  Partitioner p;
  p.kind_ = Kind::kMinSize;
  p.shards_ = max_shards;
  p.bytes_ = min_shard_bytes;
  return p;
}

Partitioner Partitioner::max_size(int64_t max_shard_bytes, int max_shards) {
  DIST_CHECK_ARG(max_shard_bytes >= 1 && max_shards >= 0, "Partitioner::max_size: max_shard_bytes ",
                 max_shard_bytes, " must be at least 1 and max_shards ", max_shards,
                 " at least 0 (0: no limit)");
  Partitioner p;
  p.kind_ = Kind::kMaxSize;
  p.shards_ = max_shards;
  p.bytes_ = max_shard_bytes;
  return p;
}

int Partitioner::num_shards(c10::IntArrayRef shape, c10::ScalarType dtype) const {
  if (shape.empty() || shape[0] <= 1) return 1;
  const int64_t rows = shape[0];
  int64_t row_bytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
  int64_t shards = 1;
  switch (kind_) {
    case Kind::kNone:
      return 1;
    case Kind::kFixed:
      shards = shards_;
      break;
    case Kind::kMinSize:
      shards = std::min<int64_t>(shards_, rows * row_bytes / bytes_);
      break;
    case Kind::kMaxSize: {
      const int64_t rows_per_shard = std::max<int64_t>(1, bytes_ / std::max<int64_t>(row_bytes, 1));
      shards = (rows + rows_per_shard - 1) / rows_per_shard;
      if (shards_ > 0) shards = std::min<int64_t>(shards, shards_);
      break;
    }
  }
  return static_cast<int>(std::clamp<int64_t>(shards, 1, rows));
}

std::vector<int64_t> Partitioner::shard_rows(int64_t rows, int shards) {
  std::vector<int64_t> out(static_cast<size_t>(shards), rows / shards);
  for (int64_t i = 0; i < rows % shards; ++i) ++out[static_cast<size_t>(i)];
  return out;
}

std::string Partitioner::description() const {
  switch (kind_) {
    case Kind::kNone:
      return "none";
    case Kind::kFixed:
      return detail::concat("fixed_shards(", shards_, ")");
    case Kind::kMinSize:
      return detail::concat("min_size(", bytes_, ", ", shards_, ")");
    case Kind::kMaxSize:
      return detail::concat("max_size(", bytes_, ", ", shards_, ")");
  }
  return "?";
}

}  // namespace dist
