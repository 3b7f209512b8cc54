#include "dist/distribute/strategy_extended.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"
#include "dist/distribute/batch_split.h"

namespace dist {

at::Tensor StrategyExtended::reduce(ReduceOp op, const std::vector<at::Tensor>& values,
                                    std::optional<int64_t> axis) {
  DIST_CHECK_ARG(!values.empty(), "reduce needs at least one value");
  if (axis) {
    // Reduce along the axis within each replica, then across replicas; MEAN divides by the
    // total number of elements along the axis, so replicas of unequal size weigh correctly.
    std::vector<at::Tensor> partial;
    int64_t count = 0;
    for (const auto& v : values) {
      count += v.size(*axis);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean:
          partial.push_back(v.sum(*axis));
          break;
        case ReduceOp::kMin:
          partial.push_back(std::get<0>(v.min(*axis)));
          break;
        case ReduceOp::kMax:
          partial.push_back(std::get<0>(v.max(*axis)));
          break;
      }
    }
    at::Tensor combined =
        reduce(op == ReduceOp::kMean ? ReduceOp::kSum : op, partial, std::nullopt);
    return op == ReduceOp::kMean ? combined / static_cast<double>(count) : combined;
  }
  at::Tensor stacked = at::stack(values);
  switch (op) {
    case ReduceOp::kSum:
      return stacked.sum(0);
    case ReduceOp::kMean:
      return stacked.sum(0) / static_cast<double>(values.size());
    case ReduceOp::kMin:
      return std::get<0>(stacked.min(0));
    case ReduceOp::kMax:
      return std::get<0>(stacked.max(0));
  }
  DIST_INTERNAL_ASSERT(false, "unknown ReduceOp");
}

at::Tensor StrategyExtended::gather(const std::vector<at::Tensor>& values, int64_t axis) {
  DIST_CHECK_ARG(!values.empty(), "gather needs at least one value");
  return at::cat(values, axis);
}

PerReplica<data::Element> StrategyExtended::distribute_batch(const data::Element& batch) const {
  int64_t global = batch.empty() || batch[0].dim() == 0 ? 0 : batch[0].size(0);
  return PerReplica<data::Element>(split_batch(batch, num_local_replicas()), global);
}

}  // namespace dist
