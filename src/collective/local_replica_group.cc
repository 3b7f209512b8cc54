// In-process collectives for the replica threads of one process.
//
// Every collective has the same skeleton:
//   1. post: each replica publishes a pointer to its input tensors and arrives at the
//      barrier; the last to arrive checks that all replicas called the same collective with
//      the same number, shapes and dtypes of tensors (else every replica gets a
//      CollectiveError naming the first replica that differs) and allocates the outputs;
//   2. reduce: the replicas compute the result from everyone's inputs, which stay valid and
//      unmodified because no replica returns before
//   3. the second barrier; afterwards each replica reads the shared result.
// The next collective's phase 1 can only complete once every replica has left this one, so
// two barrier rounds per collective suffice.
//
// Phase 2 depends on the algorithm (cross_device_ops.h). The inputs are seen as one logical
// buffer: the concatenation of all tensors, flattened. kParallelAllReduce gives replica r the
// elements [r*N/R, (r+1)*N/R) of that buffer to reduce across replicas (a reduce-scatter; the
// shared result then serves as the all-gather). kReductionToOneDevice has replica 0 reduce
// everything. kHierarchicalCopy reduces groups of ~sqrt(R) replicas into their leader's
// partial, then replica 0 reduces the partials. In every case each element is reduced once,
// in a fixed order, so all replicas see bit-identical results and repeated runs agree.
#include "collective/local_replica_group.h"

#include <ATen/ATen.h>

#include <cmath>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

// out = op(sources...) in source order; when out aliases sources[0], the copy is skipped.
void reduce_into(ReduceOp op, at::Tensor& out, const std::vector<at::Tensor>& sources,
                 bool out_is_first) {
  if (!out_is_first) out.copy_(sources[0]);
  for (size_t q = 1; q < sources.size(); ++q) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        out.add_(sources[q]);
        break;
      case ReduceOp::kMin:
        at::minimum_out(out, out, sources[q]);
        break;
      case ReduceOp::kMax:
        at::maximum_out(out, out, sources[q]);
        break;
    }
  }
}

void finish_mean(ReduceOp op, at::Tensor& out, int replicas) {
  if (op != ReduceOp::kMean) return;
  if (at::isIntegralType(out.scalar_type(), /*includeBool=*/true))
    out.div_(replicas, "trunc");  // integer MEAN truncates, keeping the dtype
  else
    out.div_(replicas);
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

}  // namespace

at::Tensor gather_across_workers(Communicator& communicator, const at::Tensor& local,
                                 int64_t axis) {
  // Gloo's all_gather needs equal shapes: exchange the sizes along the axis, pad to the
  // largest, gather, then cut each worker's part back to its size.
  auto size = at::tensor({local.size(axis)}, at::kLong);
  auto sizes = communicator.all_gather(size);
  int64_t largest = 0;
  for (const auto& s : sizes) largest = std::max(largest, s.item<int64_t>());
  auto padded_shape = local.sizes().vec();
  padded_shape[static_cast<size_t>(axis)] = largest;
  at::Tensor padded = at::zeros(padded_shape, local.options());
  padded.narrow(axis, 0, local.size(axis)).copy_(local);
  auto parts = communicator.all_gather(padded);
  for (size_t w = 0; w < parts.size(); ++w)
    parts[w] = parts[w].narrow(axis, 0, sizes[w].item<int64_t>());
  return at::cat(parts, axis);
}

LocalReplicaGroup::LocalReplicaGroup(int num_replicas, CrossDeviceOps algorithm,
                                     std::chrono::milliseconds timeout)
    : algorithm_(algorithm),
      barrier_(num_replicas, timeout),
      global_replicas_(num_replicas),
      kinds_(static_cast<size_t>(num_replicas), nullptr),
      inputs_(static_cast<size_t>(num_replicas), nullptr),
      merge_fns_(static_cast<size_t>(num_replicas), nullptr) {}

void LocalReplicaGroup::set_cross_worker(Communicator* communicator, int global_replicas) {
  cross_worker_ = communicator;
  global_replicas_ = global_replicas;
}

void LocalReplicaGroup::post(int replica, const char* what, const std::vector<at::Tensor>* values,
                             const std::function<void()>& on_complete) {
  kinds_[static_cast<size_t>(replica)] = what;
  inputs_[static_cast<size_t>(replica)] = values;
  barrier_.arrive_and_wait(replica, what, on_complete);
}

void LocalReplicaGroup::check_same_structure() const {
  const auto& first = *inputs_[0];
  for (size_t r = 1; r < inputs_.size(); ++r) {
    DIST_CHECK(std::string(kinds_[r]) == kinds_[0], CollectiveError,
               "collective mismatch: replica ", r, " called ", kinds_[r],
               " while replica 0 called ", kinds_[0],
               "; every replica must call the same collectives in the same order");
    const auto& mine = *inputs_[r];
    DIST_CHECK(mine.size() == first.size(), CollectiveError, "collective mismatch in ", kinds_[0],
               ": replica ", r, " passed ", mine.size(), " tensors but replica 0 passed ",
               first.size());
    for (size_t t = 0; t < first.size(); ++t) {
      DIST_CHECK(
          mine[t].sizes() == first[t].sizes() && mine[t].scalar_type() == first[t].scalar_type(),
          CollectiveError, "collective mismatch in ", kinds_[0], ": tensor ", t, " is ",
          shape_text(mine[t]), " on replica ", r, " but ", shape_text(first[t]),
          " on replica 0; every replica must pass tensors of the same shapes and dtypes");
    }
  }
}

void LocalReplicaGroup::reduce_range(ReduceOp op, size_t tensor, int64_t begin, int64_t end) const {
  std::vector<at::Tensor> sources;
  sources.reserve(inputs_.size());
  for (const auto* in : inputs_) sources.push_back((*in)[tensor].view(-1).slice(0, begin, end));
  at::Tensor out = outputs_[tensor].view(-1).slice(0, begin, end);
  bool aliases_first = outputs_[tensor].is_same((*inputs_[0])[tensor]);
  reduce_into(op, out, sources, aliases_first);
  finish_mean(op, out, static_cast<int>(inputs_.size()));
}

void LocalReplicaGroup::reduce_share(int replica, ReduceOp op) {
  const int replicas = static_cast<int>(inputs_.size());
  const auto& first = *inputs_[0];
  if (algorithm_ == CrossDeviceOps::kReductionToOneDevice) {
    if (replica == 0)
      for (size_t t = 0; t < first.size(); ++t) reduce_range(op, t, 0, first[t].numel());
    return;
  }
  if (algorithm_ == CrossDeviceOps::kHierarchicalCopy) {
    const int group = std::max(1, static_cast<int>(std::ceil(std::sqrt(replicas))));
    // Phase 2a: group leaders reduce their group into a partial (MEAN is a SUM until the end).
    const ReduceOp partial_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
    if (replica % group == 0) {
      const int last = std::min(replicas, replica + group);
      auto& partial = partials_[static_cast<size_t>(replica / group)];
      partial.clear();
      for (size_t t = 0; t < first.size(); ++t) {
        std::vector<at::Tensor> sources;
        for (int q = replica; q < last; ++q)
          sources.push_back((*inputs_[static_cast<size_t>(q)])[t]);
        at::Tensor out = at::empty_like(first[t], at::MemoryFormat::Contiguous);
        reduce_into(partial_op, out, sources, false);
        partial.push_back(out);
      }
    }
    barrier_.arrive_and_wait(replica, "all_reduce (hierarchical group phase)");
    // Phase 2b: replica 0 reduces the leaders' partials.
    if (replica == 0) {
      for (size_t t = 0; t < first.size(); ++t) {
        std::vector<at::Tensor> sources;
        for (const auto& partial : partials_) sources.push_back(partial[t]);
        reduce_into(partial_op, outputs_[t], sources, false);
        finish_mean(op, outputs_[t], replicas);
      }
    }
    return;
  }
  // kParallelAllReduce: this replica's share of the logical concatenated buffer.
  int64_t total = 0;
  for (const auto& t : first) total += t.numel();
  const int64_t begin = total * replica / replicas;
  const int64_t end = total * (replica + 1) / replicas;
  int64_t offset = 0;
  for (size_t t = 0; t < first.size() && offset < end; ++t) {
    const int64_t n = first[t].numel();
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) reduce_range(op, t, lo - offset, hi - offset);
    offset += n;
  }
}

std::vector<at::Tensor> LocalReplicaGroup::all_reduce(int replica, ReduceOp op,
                                                      const std::vector<at::Tensor>& values) {
  std::vector<at::Tensor> contiguous;
  for (const auto& v : values) contiguous.push_back(v.contiguous());
  post(replica, "all_reduce", &contiguous, [this] {
    check_same_structure();
    outputs_.clear();
    for (const auto& t : *inputs_[0])
      outputs_.push_back(at::empty_like(t, at::MemoryFormat::Contiguous));
    if (algorithm_ == CrossDeviceOps::kHierarchicalCopy) partials_.assign(partial_groups(), {});
  });
  reduce_share(replica, op);
  // Hierarchical across workers: the in-process result is combined across workers once,
  // by the last replica to arrive, before anyone reads it. MEAN of means is the global mean
  // since every worker has the same number of replicas.
  barrier_.arrive_and_wait(replica, "all_reduce (result)", [this, op] {
    if (cross_worker_ != nullptr) cross_worker_->all_reduce(outputs_, op);
  });
  std::vector<at::Tensor> results;
  for (const auto& out : outputs_) results.push_back(out.clone());
  return results;
}

void LocalReplicaGroup::all_reduce_into_first(int replica, ReduceOp op,
                                              const std::vector<at::Tensor>& values,
                                              const std::function<void()>& after) {
  if (replica == 0) {
    for (const auto& v : values)
      DIST_INTERNAL_ASSERT(v.is_contiguous(), "in-place all-reduce needs contiguous tensors");
  }
  std::vector<at::Tensor> contiguous;
  for (const auto& v : values) contiguous.push_back(v.contiguous());
  post(replica, "apply_gradients", &contiguous, [this] {
    check_same_structure();
    outputs_ = *inputs_[0];  // results land in replica 0's tensors
    if (algorithm_ == CrossDeviceOps::kHierarchicalCopy) partials_.assign(partial_groups(), {});
  });
  reduce_share(replica, op);
  barrier_.arrive_and_wait(replica, "apply_gradients (result)", after);
}

at::Tensor LocalReplicaGroup::all_gather(int replica, const at::Tensor& value, int64_t axis) {
  std::vector<at::Tensor> mine{value};
  post(replica, "all_gather", &mine, [this, axis] {
    const at::Tensor& first = (*inputs_[0]).at(0);
    for (size_t r = 0; r < inputs_.size(); ++r) {
      DIST_CHECK(std::string(kinds_[r]) == kinds_[0], CollectiveError,
                 "collective mismatch: replica ", r, " called ", kinds_[r],
                 " while replica 0 called ", kinds_[0]);
      const at::Tensor& t = (*inputs_[r]).at(0);
      bool same = t.dim() == first.dim() && t.scalar_type() == first.scalar_type();
      for (int64_t d = 0; same && d < t.dim(); ++d) same = d == axis || t.size(d) == first.size(d);
      DIST_CHECK(same && axis >= 0 && axis < std::max<int64_t>(first.dim(), 1), CollectiveError,
                 "all_gather along axis ", axis, ": replica ", r, " passed ", shape_text(t),
                 " but replica 0 passed ", shape_text(first),
                 "; shapes may differ only along the gathered axis");
    }
  });
  std::vector<at::Tensor> parts;
  for (const auto* in : inputs_) parts.push_back(in->at(0));
  barrier_.arrive_and_wait(replica, "all_gather (result)", [this, &parts, axis] {
    gathered_ = at::cat(parts, axis);
    if (cross_worker_ != nullptr)
      gathered_ = gather_across_workers(*cross_worker_, gathered_, axis);
  });
  return gathered_.clone();
}

void LocalReplicaGroup::merge_call(int replica, const std::function<void()>& fn) {
  merge_fns_[static_cast<size_t>(replica)] = &fn;
  barrier(replica, "merge_call", [this] {
    ReplicaContextScope cross_replica(nullptr);
    (*merge_fns_[0])();  // replica 0's function, once, as in tf.distribute
  });
}

void LocalReplicaGroup::barrier(int replica, const char* what, const std::function<void()>& fn) {
  static const std::vector<at::Tensor> kNothing;
  post(replica, what, &kNothing, [this, &fn] {
    for (size_t r = 1; r < kinds_.size(); ++r)
      DIST_CHECK(std::string(kinds_[r]) == kinds_[0], CollectiveError,
                 "collective mismatch: replica ", r, " called ", kinds_[r],
                 " while replica 0 called ", kinds_[0]);
    if (fn) fn();
  });
}

size_t LocalReplicaGroup::partial_groups() const {
  const int replicas = static_cast<int>(inputs_.size());
  const int group = std::max(1, static_cast<int>(std::ceil(std::sqrt(replicas))));
  return static_cast<size_t>((replicas + group - 1) / group);
}

}  // namespace dist::collective
