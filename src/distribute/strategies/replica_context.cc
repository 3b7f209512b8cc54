#include "dist/distribute/replica_context.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "collective/communicator.h"
#include "dist/core/error.h"
#include "distribute/reduction/backward_collective.h"

namespace dist {
namespace {
thread_local ReplicaContext* current_context = nullptr;
thread_local int backward_collectives = 0;
}  // namespace

BackwardCollectiveScope::BackwardCollectiveScope() { ++backward_collectives; }
BackwardCollectiveScope::~BackwardCollectiveScope() { --backward_collectives; }
bool in_backward_collective() { return backward_collectives > 0; }

namespace detail {

// y = the reduction of every replica's x; dL/dx = the same reduction of every replica's dL/dy
// (SUM: each x adds to every replica's y; MEAN: the same, divided by the replicas).
struct AllReduceGradient : public torch::autograd::Function<AllReduceGradient> {
  static at::Tensor forward(torch::autograd::AutogradContext* autograd, const at::Tensor& value,
                            int64_t op, ReplicaContext* context) {
    autograd->saved_data["op"] = op;
    autograd->saved_data["strategy"] = reinterpret_cast<int64_t>(context->strategy());
    std::vector<at::Tensor> result{value.detach().clone(at::MemoryFormat::Contiguous)};
    context->group_->all_reduce(result, static_cast<ReduceOp>(op))->wait();
    return result[0];
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* autograd,
                                                 torch::autograd::variable_list grads) {
    const auto op = static_cast<ReduceOp>(autograd->saved_data["op"].toInt());
    // As in TensorFlow, the missing gradient is an error when it is asked for, not before.
    DIST_CHECK_ARG(op == ReduceOp::kSum || op == ReduceOp::kMean, "ReplicaContext::all_reduce ",
                   to_string(op),
                   " has no gradient, but backward reached it; all-reduce value.detach() where "
                   "no gradient should flow");
    ReplicaContext* context = get_replica_context();
    DIST_CHECK_ARG(context != nullptr && reinterpret_cast<int64_t>(context->strategy()) ==
                                             autograd->saved_data["strategy"].toInt(),
                   "a gradient through ReplicaContext::all_reduce is itself an all-reduce of "
                   "every replica: run backward inside the strategy.run() that computed the "
                   "forward pass, on every replica");
    std::vector<at::Tensor> gradient{grads[0].contiguous().clone()};
    {
      BackwardCollectiveScope inside_backward;
      context->group_->all_reduce(gradient, op)->wait();
    }
    return {gradient[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace detail

ReplicaContext::ReplicaContext(std::shared_ptr<const StrategyExtended> strategy,
                               collective::Communicator* group, int local_replica_id,
                               int64_t global_batch_size)
    : strategy_(std::move(strategy)),
      group_(group),
      local_replica_id_(local_replica_id),
      global_batch_size_(global_batch_size) {
  DIST_INTERNAL_ASSERT(group_ != nullptr && local_replica_id_ >= 0);
}

int ReplicaContext::replica_id_in_sync_group() const { return group_->rank(); }

int ReplicaContext::num_replicas_in_sync() const { return group_->size(); }

std::vector<at::Tensor> ReplicaContext::all_reduce(ReduceOp op,
                                                   const std::vector<at::Tensor>& values) {
  // Values that need a gradient go one by one through the differentiable all-reduce (every
  // replica passes the same values, so the collectives pair up); the others in one call.
  const bool differentiable = at::GradMode::is_enabled() &&
                              std::any_of(values.begin(), values.end(),
                                          [](const at::Tensor& v) { return v.requires_grad(); });
  if (differentiable) {
    std::vector<at::Tensor> results;
    for (const auto& v : values) results.push_back(all_reduce(op, v));
    return results;
  }
  // Results are fresh tensors the caller may modify; the inputs are left alone.
  std::vector<at::Tensor> results;
  results.reserve(values.size());
  for (const auto& v : values) results.push_back(v.clone(at::MemoryFormat::Contiguous));
  group_->all_reduce(results, op)->wait();
  return results;
}

at::Tensor ReplicaContext::all_reduce(ReduceOp op, const at::Tensor& value) {
  if (!value.requires_grad() || !at::GradMode::is_enabled())
    return all_reduce(op, std::vector<at::Tensor>{value}).at(0);
  return detail::AllReduceGradient::apply(value, static_cast<int64_t>(op), this);
}

std::map<std::string, at::Tensor> ReplicaContext::all_reduce(
    ReduceOp op, const std::map<std::string, at::Tensor>& values) {
  // std::map iterates in key order, so every replica passes its tensors in the same order.
  std::vector<at::Tensor> flat;
  for (const auto& [name, tensor] : values) flat.push_back(tensor);
  auto reduced = all_reduce(op, flat);
  std::map<std::string, at::Tensor> out;
  size_t i = 0;
  for (const auto& entry : values) out[entry.first] = reduced.at(i++);
  return out;
}

at::Tensor ReplicaContext::all_gather(const at::Tensor& value, int64_t axis) {
  DIST_CHECK_ARG(axis >= 0 && axis < std::max<int64_t>(value.dim(), 1), "all_gather along axis ",
                 axis, " of a tensor of shape ", value.sizes());
  // The communicator gathers along dim 0: move `axis` there and back.
  at::Tensor gathered;
  group_->all_gather(value.dim() == 0 ? value.reshape({1}) : value.movedim(axis, 0), &gathered)
      ->wait();
  return value.dim() == 0 ? gathered : gathered.movedim(0, axis);
}

void ReplicaContext::merge_call(const std::function<void()>& fn) {
  group_->barrier()->wait();
  if (local_replica_id_ == 0) {
    ReplicaContextScope cross_replica(nullptr);
    fn();
  }
  group_->barrier()->wait();
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
