#include "dist/core/replica_context.h"

#include "dist/core/error.h"

namespace dist {
namespace {
thread_local ReplicaContext* current_context = nullptr;
}

ReplicaContext::ReplicaContext(detail::ReplicaGroup* group, int replica_id,
                               int64_t global_batch_size, int local_replica_id)
    : group_(group),
      replica_id_(replica_id),
      global_batch_size_(global_batch_size),
      local_replica_id_(local_replica_id < 0 ? replica_id : local_replica_id) {
  DIST_INTERNAL_ASSERT(group_ != nullptr);
}

int ReplicaContext::num_replicas_in_sync() const { return group_->num_replicas_in_sync(); }

at::Tensor ReplicaContext::all_reduce(ReduceOp op, const at::Tensor& value) {
  return group_->all_reduce(local_replica_id_, op, {value}).at(0);
}

std::vector<at::Tensor> ReplicaContext::all_reduce(ReduceOp op,
                                                   const std::vector<at::Tensor>& values) {
  return group_->all_reduce(local_replica_id_, op, values);
}

std::map<std::string, at::Tensor> ReplicaContext::all_reduce(
    ReduceOp op, const std::map<std::string, at::Tensor>& values) {
  // std::map iterates in key order, so every replica passes its tensors in the same order.
  std::vector<at::Tensor> flat;
  for (const auto& [name, tensor] : values) flat.push_back(tensor);
  auto reduced = group_->all_reduce(local_replica_id_, op, flat);
  std::map<std::string, at::Tensor> out;
  size_t i = 0;
  for (const auto& entry : values) out[entry.first] = reduced.at(i++);
  return out;
}

at::Tensor ReplicaContext::all_gather(const at::Tensor& value, int64_t axis) {
  return group_->all_gather(local_replica_id_, value, axis);
}

void ReplicaContext::merge_call(const std::function<void()>& fn) {
  group_->merge_call(local_replica_id_, fn);
}

ReplicaContext* get_replica_context() { return current_context; }

bool in_multi_replica_context() {
  return current_context != nullptr && current_context->num_replicas_in_sync() > 1;
}

ReplicaContextScope::ReplicaContextScope(ReplicaContext* context) : previous_(current_context) {
  current_context = context;
}

ReplicaContextScope::~ReplicaContextScope() { current_context = previous_; }

}  // namespace dist
