#include "dist/distribute/strategy.h"

#include <ATen/ATen.h>

#include "dist/core/blas_core.h"

namespace dist {

Strategy::Strategy(std::shared_ptr<StrategyExtended> extended) : extended_(std::move(extended)) {
  DIST_INTERNAL_ASSERT(extended_ != nullptr);
  // Before the first step: OpenBLAS's kernels for this CPU where it did not know the model
  // (once per process; nothing changes where it did).
  choose_openblas_core();
}

at::Tensor Strategy::reduce(ReduceOp op, const PerReplica<at::Tensor>& value,
                            std::optional<int64_t> axis) const {
  return extended_->reduce(op, value.values(), axis);
}

double Strategy::reduce(ReduceOp op, const PerReplica<double>& value) const {
  std::vector<at::Tensor> tensors;
  for (double v : value.values()) tensors.push_back(at::scalar_tensor(v, at::kDouble));
  return extended_->reduce(op, tensors, std::nullopt).item<double>();
}

std::map<std::string, at::Tensor> Strategy::reduce(
    ReduceOp op, const PerReplica<std::map<std::string, at::Tensor>>& value) const {
  DIST_CHECK_ARG(value.size() > 0, "reduce needs at least one replica value");
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, first] : value[0]) {
    std::vector<at::Tensor> parts;
    for (const auto& replica : value.values()) {
      auto it = replica.find(name);
      DIST_CHECK_ARG(it != replica.end(), "reduce: replica values have different keys: '", name,
                     "' is missing in one replica; every replica must return the same keys");
      parts.push_back(it->second);
    }
    out[name] = extended_->reduce(op, parts, std::nullopt);
  }
  for (const auto& replica : value.values())
    DIST_CHECK_ARG(replica.size() == out.size(),
                   "reduce: replica values have different keys; every replica must return the "
                   "same keys");
  return out;
}

at::Tensor Strategy::gather(const PerReplica<at::Tensor>& value, int64_t axis) const {
  return extended_->gather(value.values(), axis);
}

DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& global_batches,
                                                             DistributeOptions options) const {
  return DistributedDataset(global_batches, extended_, InputKind::kGlobalBatches, options);
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const InputContext&)>& fn) const {
  DIST_CHECK_ARG(static_cast<bool>(fn), "distribute_datasets_from_function needs a function");
  InputContext context;
  context.num_replicas_in_sync = extended_->num_replicas_in_sync();
  context.num_input_pipelines = extended_->num_workers();
  context.input_pipeline_id = extended_->worker_index();
  return DistributedDataset(fn(context), extended_, InputKind::kPerReplicaBatches);
}

}  // namespace dist
