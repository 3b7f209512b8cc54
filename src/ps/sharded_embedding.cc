// ShardedEmbedding (include/dist/distribute/sharded_embedding.h).
#include "dist/distribute/sharded_embedding.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>
#include <torch/torch.h>

#include "dist/core/error.h"

namespace dist {

ShardedEmbeddingImpl::ShardedEmbeddingImpl(ShardedEmbeddingOptions options) : options_(options) {
  DIST_CHECK_ARG(options_.num_rows >= 1 && options_.dim >= 1,
                 "ShardedEmbedding: the table needs at least one row and one column, got ",
                 options_.num_rows, " x ", options_.dim);
  DIST_CHECK_ARG(options_.init_range >= 0,
                 "ShardedEmbedding: init_range must not be negative, got ", options_.init_range);
  reset();
}

void ShardedEmbeddingImpl::reset() {
  weight = register_parameter("weight", torch::empty({options_.num_rows, options_.dim}));
  torch::NoGradGuard no_grad;
  weight.uniform_(-options_.init_range, options_.init_range);
}

at::Tensor ShardedEmbeddingImpl::forward(const at::Tensor& ids) {
  DIST_CHECK_ARG(at::isIntegralType(ids.scalar_type(), /*includeBool=*/false),
                 "ShardedEmbedding: ids must be integer row numbers, got a tensor of ",
                 ids.scalar_type());
  const at::Tensor flat = ids.reshape({-1}).to(at::kLong);
  if (flat.numel() > 0) {
    const int64_t low = flat.min().item<int64_t>(), high = flat.max().item<int64_t>();
    DIST_CHECK_ARG(low >= 0 && high < options_.num_rows, "ShardedEmbedding: id ",
                   low < 0 ? low : high, " is outside the table's ", options_.num_rows,
                   " rows; ids must be in [0, ", options_.num_rows, ")");
  }
  // The distinct rows first, then one copy per id: what crosses the wire under
  // ParameterServerStrategy is each row once, and every path computes the same sums.
  at::Tensor unique, inverse;
  std::tie(unique, inverse, std::ignore) =
      at::_unique2(flat, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
  at::Tensor rows;
  if (attached_.row_source && unique.numel() > 0) rows = attached_.row_source(unique);
  if (rows.defined()) {
    if (torch::GradMode::is_enabled()) {
      rows = rows.detach().requires_grad_(true);
      std::lock_guard<std::mutex> lock(attached_.mutex);
      attached_.lookups.push_back({unique, rows});
    }
  } else {
    rows = weight.index_select(0, unique);
  }
  auto shape = ids.sizes().vec();
  shape.push_back(options_.dim);
  return rows.index_select(0, inverse).view(shape);
}

void ShardedEmbeddingImpl::set_row_source(RowSource source) {
  attached_.row_source = std::move(source);
}

std::vector<ShardedEmbeddingImpl::Lookup> ShardedEmbeddingImpl::take_lookups() {
  std::lock_guard<std::mutex> lock(attached_.mutex);
  return std::exchange(attached_.lookups, {});
}

}  // namespace dist
