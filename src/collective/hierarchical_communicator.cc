#include "collective/hierarchical_communicator.h"

#include <ATen/ATen.h>

#include "collective/collective_thread.h"
#include "collective/forwarding_communicator.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

// A communicator whose calls are issued one at a time (c10d pairs calls by issue order).
class SerializedCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.all_reduce(tensors, op);
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.broadcast(tensors, root);
  }
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.all_gather(input, output);
  }
  // The inner one's own: it writes each member's part in place (the default would gather every
  // part into a buffer of the output's size, then copy it).
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.all_gather_into(input, output);
  }
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.reduce_scatter(input, output, op);
  }
  WorkHandle barrier() override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.barrier();
  }
  std::shared_ptr<void> share_memory(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.share_memory(bytes);
  }

 private:
  std::mutex mu_;
};

std::string join_lines(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += std::to_string(v.size()) + ":" + v;
  return out;
}

std::vector<std::string> split_joined(const std::string& text) {
  std::vector<std::string> values;
  size_t at = 0;
  while (at < text.size()) {
    const size_t colon = text.find(':', at);
    DIST_INTERNAL_ASSERT(colon != std::string::npos, "malformed exchange text");
    const size_t n = std::stoul(text.substr(at, colon - at));
    values.push_back(text.substr(colon + 1, n));
    at = colon + 1 + n;
  }
  return values;
}

}  // namespace

namespace {

// The local group's options, saying which process it is when there are several.
LocalGroupOptions placed(LocalGroupOptions local, const Communicator* cross_process) {
  DIST_INTERNAL_ASSERT(cross_process != nullptr);
  if (cross_process->size() > 1)
    local.place = " of " + cross_process->member_name(cross_process->rank());
  return local;
}

}  // namespace

HierarchicalGroup::HierarchicalGroup(const LocalGroupOptions& local,
                                     std::unique_ptr<Communicator> cross_process,
                                     bool collective_thread)
    : local_(std::make_shared<LocalGroup>(placed(local, cross_process.get()))),
      cross_(std::move(cross_process)) {
  if (collective_thread) {
    ordered_ = on_collective_thread(*cross_);
  } else {
    ordered_ = std::make_unique<SerializedCommunicator>(*cross_);
  }
}

Communicator& HierarchicalGroup::cross_stage() {
  if (before_cross_stage_) before_cross_stage_();
  return *ordered_;
}

std::unique_ptr<Communicator> HierarchicalGroup::member(int local_rank) {
  return std::make_unique<HierarchicalCommunicator>(shared_from_this(), local_rank);
}

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<HierarchicalGroup> group,
                                                   int local_rank)
    : group_(std::move(group)), local_rank_(local_rank) {
  DIST_INTERNAL_ASSERT(local_rank_ >= 0 && local_rank_ < group_->local_size());
}

int HierarchicalCommunicator::rank() const {
  return group_->process_rank() * group_->local_size() + local_rank_;
}

int HierarchicalCommunicator::size() const {
  return group_->num_processes() * group_->local_size();
}

std::string HierarchicalCommunicator::member_name(int rank) const {
  const int local = group_->local_size();
  return group_->local().member_name(rank % local) + " of " +
         group_->cross_->member_name(rank / local);
}

WorkHandle HierarchicalCommunicator::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  // MEAN: the local mean, then the mean over processes (every process has L replicas).
  group_->local().all_reduce(local_rank_, tensors, op, [this, op](std::vector<at::Tensor>& out) {
    group_->cross_stage().all_reduce(out, op)->wait();
  });
  return completed_work();
}

WorkHandle HierarchicalCommunicator::all_reduce_to_process_leader(std::vector<at::Tensor>& tensors,
                                                                  ReduceOp op) {
  group_->local().reduce_to_first(local_rank_, tensors, op,
                                  [this, op](std::vector<at::Tensor>& out) {
                                    group_->cross_stage().all_reduce(out, op)->wait();
                                  });
  return completed_work();
}

WorkHandle HierarchicalCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  DIST_CHECK_ARG(root >= 0 && root < size(), "broadcast root ", root, " is outside 0..",
                 size() - 1);
  const int local = group_->local_size();
  const int root_process = root / local;
  // In the root's process the root's values go out; elsewhere replica 0's tensors are only
  // the buffer the cross-process broadcast fills.
  const int source = group_->process_rank() == root_process ? root % local : 0;
  group_->local().broadcast(local_rank_, tensors, source,
                            [this, root_process](std::vector<at::Tensor>& out) {
                              group_->cross_stage().broadcast(out, root_process)->wait();
                            });
  return completed_work();
}

WorkHandle HierarchicalCommunicator::all_gather(const at::Tensor& input, at::Tensor* output) {
  *output = group_->local().all_gather(local_rank_, input, 0, [this](const at::Tensor& local) {
    at::Tensor all;
    group_->cross_stage().all_gather(local, &all)->wait();
    return all;
  });
  return completed_work();
}

WorkHandle HierarchicalCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                                    ReduceOp op) {
  return reduce_scatter_by_all_reduce(*this, input, output, op);
}

WorkHandle HierarchicalCommunicator::barrier() {
  group_->local().barrier(local_rank_, "barrier",
                          [this] { group_->cross_stage().barrier()->wait(); });
  return completed_work();
}

int HierarchicalCommunicator::cross_tag(int tag, int local_from, int local_to) const {
  const int local = group_->local_size();
  return (tag * local + local_from) * local + local_to;
}

WorkHandle HierarchicalCommunicator::send(const at::Tensor& tensor, int to, int tag) {
  check_peer("send", member_name(rank()), rank(), to, size());
  const int local = group_->local_size();
  if (to / local == group_->process_rank()) {
    group_->local().send(local_rank_, tensor, to % local, tag);
    return completed_work();
  }
  return group_->cross_process().send(tensor, to / local, cross_tag(tag, local_rank_, to % local));
}

WorkHandle HierarchicalCommunicator::recv(at::Tensor& tensor, int from, int tag) {
  check_peer("recv", member_name(rank()), rank(), from, size());
  const int local = group_->local_size();
  if (from / local == group_->process_rank()) {
    group_->local().recv(local_rank_, tensor, from % local, tag);
    return completed_work();
  }
  return group_->cross_process().recv(tensor, from / local,
                                      cross_tag(tag, from % local, local_rank_));
}

std::vector<std::string> HierarchicalCommunicator::exchange(const std::string& key,
                                                            const std::string& value) {
  auto local_values = group_->local().exchange(local_rank_, key, value);
  group_->local().barrier(local_rank_, "exchange (across processes)", [&] {
    std::vector<std::string> all;
    for (const auto& joined : group_->cross_stage().exchange(key, join_lines(local_values)))
      for (auto& v : split_joined(joined)) all.push_back(std::move(v));
    group_->exchanged_ = std::move(all);
  });
  auto result = group_->exchanged_;
  group_->local().barrier(local_rank_, "exchange (read)");
  return result;
}

}  // namespace dist::collective
