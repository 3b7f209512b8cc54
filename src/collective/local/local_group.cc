// In-process collectives for the threads (replicas) of one process.
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
#include "collective/local/local_group.h"

#include "collective/communicator.h"

#include <ATen/ATen.h>

#include <cmath>

#include "dist/core/error.h"

namespace dist::collective {
namespace {

void finish_mean(ReduceOp op, at::Tensor& out, int replicas) {
  if (op == ReduceOp::kMean) divide_for_mean(out, replicas);
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

}  // namespace

void LocalGroup::reduce_range(ReduceOp op, size_t tensor, int64_t begin, int64_t end) const {
  std::vector<at::Tensor> sources;
  sources.reserve(inputs_.size());
  for (const auto* in : inputs_) sources.push_back((*in)[tensor].view(-1).slice(0, begin, end));
  at::Tensor out = outputs_[tensor].view(-1).slice(0, begin, end);
  bool aliases_first = outputs_[tensor].is_same((*inputs_[0])[tensor]);
  reduce_in_order(op, out, sources, aliases_first);
  finish_mean(op, out, static_cast<int>(inputs_.size()));
}

void LocalGroup::reduce_share(int rank, ReduceOp op) {
  const int replicas = static_cast<int>(inputs_.size());
  const auto& first = *inputs_[0];
  if (options_.algorithm == CrossDeviceOps::kReductionToOneDevice) {
    if (rank == 0)
      for (size_t t = 0; t < first.size(); ++t) reduce_range(op, t, 0, first[t].numel());
    return;
  }
  if (options_.algorithm == CrossDeviceOps::kHierarchicalCopy) {
    const int group = std::max(1, static_cast<int>(std::ceil(std::sqrt(replicas))));
    // Phase 2a: group leaders reduce their group into a partial (MEAN is a SUM until the end).
    const ReduceOp partial_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
    if (rank % group == 0) {
      const int last = std::min(replicas, rank + group);
      auto& partial = partials_[static_cast<size_t>(rank / group)];
      partial.clear();
      for (size_t t = 0; t < first.size(); ++t) {
        std::vector<at::Tensor> sources;
        for (int q = rank; q < last; ++q) sources.push_back((*inputs_[static_cast<size_t>(q)])[t]);
        at::Tensor out = at::empty_like(first[t], at::MemoryFormat::Contiguous);
        reduce_in_order(partial_op, out, sources, false);
        partial.push_back(out);
      }
    }
    barrier_.arrive_and_wait(rank, "all_reduce (hierarchical group phase)");
    // Phase 2b: rank 0 reduces the leaders' partials.
    if (rank == 0) {
      for (size_t t = 0; t < first.size(); ++t) {
        std::vector<at::Tensor> sources;
        for (const auto& partial : partials_) sources.push_back(partial[t]);
        reduce_in_order(partial_op, outputs_[t], sources, false);
        finish_mean(op, outputs_[t], replicas);
      }
    }
    return;
  }
  // kParallelAllReduce: this rank's share of the logical concatenated buffer.
  int64_t total = 0;
  for (const auto& t : first) total += t.numel();
  const int64_t begin = total * rank / replicas;
  const int64_t end = total * (rank + 1) / replicas;
  int64_t offset = 0;
  for (size_t t = 0; t < first.size() && offset < end; ++t) {
    const int64_t n = first[t].numel();
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) reduce_range(op, t, lo - offset, hi - offset);
    offset += n;
  }
}

LocalGroup::LocalGroup(LocalGroupOptions options)
    : options_(std::move(options)),
      barrier_(options_.size, options_.timeout, options_.place),
      kinds_(static_cast<size_t>(options_.size), nullptr),
      inputs_(static_cast<size_t>(options_.size), nullptr),
      exchanged_(static_cast<size_t>(options_.size)) {}

std::string LocalGroup::member_name(int rank) const {
  return options_.member_kind + " " + std::to_string(rank);
}

void LocalGroup::post(int rank, const char* what, const std::vector<at::Tensor>* values,
                      const std::function<void()>& on_complete) {
  kinds_[static_cast<size_t>(rank)] = what;
  inputs_[static_cast<size_t>(rank)] = values;
  barrier_.arrive_and_wait(rank, what, on_complete);
}

void LocalGroup::check_same_kind() const {
  for (size_t r = 1; r < kinds_.size(); ++r)
    DIST_CHECK(std::string(kinds_[r]) == kinds_[0], CollectiveError,
               "collective mismatch: ", member_name(static_cast<int>(r)), " called ", kinds_[r],
               " while ", member_name(0), " called ", kinds_[0],
               "; every replica must call the same collectives in the same order");
}

void LocalGroup::check_same_structure() const {
  check_same_kind();
  const auto& first = *inputs_[0];
  for (size_t r = 1; r < inputs_.size(); ++r) {
    const auto& mine = *inputs_[r];
    DIST_CHECK(mine.size() == first.size(), CollectiveError, "collective mismatch in ", kinds_[0],
               ": ", member_name(static_cast<int>(r)), " passed ", mine.size(), " tensors but ",
               member_name(0), " passed ", first.size());
    for (size_t t = 0; t < first.size(); ++t) {
      DIST_CHECK(
          mine[t].sizes() == first[t].sizes() && mine[t].scalar_type() == first[t].scalar_type(),
          CollectiveError, "collective mismatch in ", kinds_[0], ": tensor ", t, " is ",
          shape_text(mine[t]), " on ", member_name(static_cast<int>(r)), " but ",
          shape_text(first[t]), " on ", member_name(0),
          "; every replica must pass tensors of the same shapes and dtypes");
    }
  }
}

void LocalGroup::all_reduce(int rank, std::vector<at::Tensor>& tensors, ReduceOp op,
                            const Stage& then) {
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  for (const auto& t : tensors) contiguous.push_back(t.contiguous());
  post(rank, "all_reduce", &contiguous, [this] {
    check_same_structure();
    outputs_.clear();
    for (const auto& t : *inputs_[0])
      outputs_.push_back(at::empty_like(t, at::MemoryFormat::Contiguous));
    if (options_.algorithm == CrossDeviceOps::kHierarchicalCopy)
      partials_.assign(partial_groups(), {});
  });
  reduce_share(rank, op);
  barrier_.arrive_and_wait(rank, "all_reduce (result)", [this, &then] {
    if (then) then(outputs_);
  });
  // outputs_ stays valid until every member has posted the next collective, so after this
  // one: copying out needs no third round.
  for (size_t t = 0; t < tensors.size(); ++t) tensors[t].copy_(outputs_[t]);
}

void LocalGroup::reduce_to_first(int rank, std::vector<at::Tensor>& tensors, ReduceOp op,
                                 const Stage& then) {
  if (rank == 0) {
    for (const auto& t : tensors)
      DIST_INTERNAL_ASSERT(t.is_contiguous(), "an in-place reduction needs contiguous tensors");
  }
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(tensors.size());
  for (const auto& t : tensors) contiguous.push_back(t.contiguous());
  post(rank, "apply_gradients", &contiguous, [this] {
    check_same_structure();
    outputs_ = *inputs_[0];  // results land in rank 0's tensors
    if (options_.algorithm == CrossDeviceOps::kHierarchicalCopy)
      partials_.assign(partial_groups(), {});
  });
  reduce_share(rank, op);
  barrier_.arrive_and_wait(rank, "apply_gradients (result)", [this, &then] {
    if (then) then(outputs_);
  });
}

void LocalGroup::broadcast(int rank, std::vector<at::Tensor>& tensors, int root,
                           const Stage& then) {
  DIST_CHECK_ARG(root >= 0 && root < size(), "broadcast root ", root, " is not a member of ",
                 size());
  post(rank, "broadcast", &tensors, [this] { check_same_structure(); });
  barrier_.arrive_and_wait(rank, "broadcast (result)", [this, root, &then] {
    outputs_.clear();
    for (const auto& t : *inputs_[static_cast<size_t>(root)])
      outputs_.push_back(t.clone(at::MemoryFormat::Contiguous));
    if (then) then(outputs_);
  });
  for (size_t t = 0; t < tensors.size(); ++t) tensors[t].copy_(outputs_[t]);
}

at::Tensor LocalGroup::all_gather(int rank, const at::Tensor& input, int64_t axis,
                                  const std::function<at::Tensor(const at::Tensor&)>& then) {
  std::vector<at::Tensor> mine{input};
  post(rank, "all_gather", &mine, [this, axis] {
    check_same_kind();
    const at::Tensor& first = (*inputs_[0]).at(0);
    for (size_t r = 0; r < inputs_.size(); ++r) {
      const at::Tensor& t = (*inputs_[r]).at(0);
      bool same = t.dim() == first.dim() && t.scalar_type() == first.scalar_type();
      for (int64_t d = 0; same && d < t.dim(); ++d) same = d == axis || t.size(d) == first.size(d);
      DIST_CHECK(same && axis >= 0 && axis < std::max<int64_t>(first.dim(), 1), CollectiveError,
                 "all_gather along axis ", axis, ": ", member_name(static_cast<int>(r)), " passed ",
                 shape_text(t), " but ", member_name(0), " passed ", shape_text(first),
                 "; shapes may differ only along the gathered axis");
    }
  });
  barrier_.arrive_and_wait(rank, "all_gather (result)", [this, axis, &then] {
    std::vector<at::Tensor> parts;
    for (const auto* in : inputs_) parts.push_back(in->at(0));
    gathered_ = at::cat(parts, axis);
    if (then) gathered_ = then(gathered_);
  });
  return gathered_.clone();
}

void LocalGroup::barrier(int rank, const char* what, const std::function<void()>& fn) {
  static const std::vector<at::Tensor> kNothing;
  post(rank, what, &kNothing, [this, &fn] {
    check_same_kind();
    if (fn) fn();
  });
}

void LocalGroup::send(int rank, const at::Tensor& tensor, int to, int tag) {
  check_peer("send", member_name(rank), rank, to, size());
  std::lock_guard<std::mutex> lock(mailbox_mu_);
  mailbox_[{rank, to, tag}].push_back(tensor.clone());
  mailbox_changed_.notify_all();
}

void LocalGroup::recv(int rank, at::Tensor& tensor, int from, int tag) {
  check_peer("recv", member_name(rank), rank, from, size());
  std::unique_lock<std::mutex> lock(mailbox_mu_);
  const auto key = std::make_tuple(from, rank, tag);
  const bool arrived = mailbox_changed_.wait_for(lock, options_.timeout, [&] {
    auto it = mailbox_.find(key);
    return !mailbox_abort_.empty() || (it != mailbox_.end() && !it->second.empty());
  });
  if (!mailbox_abort_.empty()) throw CollectiveError(mailbox_abort_);
  DIST_CHECK(arrived, CollectiveError, "collective timeout: ", member_name(from),
             " did not send tag ", tag, " to ", member_name(rank), " within ",
             options_.timeout.count() / 1000.0, " s");
  auto& queue = mailbox_[key];
  at::Tensor message = queue.front();
  queue.erase(queue.begin());
  DIST_CHECK(message.sizes() == tensor.sizes() && message.scalar_type() == tensor.scalar_type(),
             CollectiveError, "recv on ", member_name(rank), " expected ", shape_text(tensor),
             " but ", member_name(from), " sent ", shape_text(message));
  tensor.copy_(message);
}

std::vector<std::string> LocalGroup::exchange(int rank, const std::string& key,
                                              const std::string& value) {
  exchanged_[static_cast<size_t>(rank)] = value;
  barrier(rank, "exchange");
  std::vector<std::string> values = exchanged_;
  barrier(rank, "exchange (read)");
  return values;
}

void LocalGroup::abort(const std::string& reason) {
  barrier_.abort(reason);
  std::lock_guard<std::mutex> lock(mailbox_mu_);
  if (mailbox_abort_.empty()) mailbox_abort_ = reason;
  mailbox_changed_.notify_all();
}

void LocalGroup::reset() {
  barrier_.reset();
  std::lock_guard<std::mutex> lock(mailbox_mu_);
  mailbox_abort_.clear();
  mailbox_.clear();
}

size_t LocalGroup::partial_groups() const {
  const int members = static_cast<int>(inputs_.size());
  const int group = std::max(1, static_cast<int>(std::ceil(std::sqrt(members))));
  return static_cast<size_t>((members + group - 1) / group);
}

}  // namespace dist::collective
