#include "dist/distribute/strategy_extended.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"
#include "dist/distribute/batch_split.h"

namespace dist {

at::Tensor StrategyExtended::reduce_locally(ReduceOp op, const std::vector<at::Tensor>& values,
                                            std::optional<int64_t> axis, int64_t* count) {
  DIST_CHECK_ARG(!values.empty(), "reduce needs at least one value");
  const ReduceOp combine = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  std::vector<at::Tensor> partial;
  *count = 0;
  for (const auto& v : values) {
    if (!axis) {
      partial.push_back(v);
      *count += 1;
      continue;
    }
    // Reduce along the axis within each replica first; MEAN then divides by the total number
    // of elements along the axis, so replicas of unequal size weigh correctly.
    *count += v.size(*axis);
    switch (combine) {
      case ReduceOp::kMin:
        partial.push_back(std::get<0>(v.min(*axis)));
        break;
      case ReduceOp::kMax:
        partial.push_back(std::get<0>(v.max(*axis)));
        break;
      default:
        partial.push_back(v.sum(*axis));
        break;
    }
  }
  at::Tensor stacked = at::stack(partial);
  switch (combine) {
    case ReduceOp::kMin:
      return std::get<0>(stacked.min(0));
    case ReduceOp::kMax:
      return std::get<0>(stacked.max(0));
    default:
      return stacked.sum(0);
  }
}

at::Tensor StrategyExtended::reduce(ReduceOp op, const std::vector<at::Tensor>& values,
                                    std::optional<int64_t> axis) {
  int64_t count = 0;
  at::Tensor result = reduce_locally(op, values, axis, &count);
  return op == ReduceOp::kMean ? result / static_cast<double>(count) : result;
}

at::Tensor StrategyExtended::gather(const std::vector<at::Tensor>& values, int64_t axis) {
  DIST_CHECK_ARG(!values.empty(), "gather needs at least one value");
  return at::cat(values, axis);
}

PerReplica<data::Element> StrategyExtended::distribute_batch(const data::Element& batch,
                                                             AutoShardPolicy policy) const {
  DIST_CHECK_ARG(policy != AutoShardPolicy::kFile,
                 "AutoShardPolicy::kFile needs a dataset read from a list of files; datasets "
                 "here are built from tensors: use AutoShardPolicy::kData");
  int64_t global = batch.empty() || batch[0].dim() == 0 ? 0 : batch[0].size(0);
  return PerReplica<data::Element>(split_batch(batch, num_local_replicas()), global);
}

}  // namespace dist
