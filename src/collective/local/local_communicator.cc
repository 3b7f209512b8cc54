#include "collective/local/local_communicator.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"

namespace dist::collective {

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  DIST_INTERNAL_ASSERT(group_ && rank_ >= 0 && rank_ < group_->size());
}

WorkHandle LocalCommunicator::all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) {
  group_->all_reduce(rank_, tensors, op);
  return completed_work();
}

WorkHandle LocalCommunicator::all_reduce_to_process_leader(std::vector<at::Tensor>& tensors,
                                                           ReduceOp op) {
  group_->reduce_to_first(rank_, tensors, op);
  return completed_work();
}

WorkHandle LocalCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  group_->broadcast(rank_, tensors, root);
  return completed_work();
}

WorkHandle LocalCommunicator::all_gather(const at::Tensor& input, at::Tensor* output) {
  *output = group_->all_gather(rank_, input, 0);
  return completed_work();
}

WorkHandle LocalCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                             ReduceOp op) {
  // The in-process all_reduce already splits the work by member; keep this member's rows.
  return reduce_scatter_by_all_reduce(*this, input, output, op);
}

WorkHandle LocalCommunicator::barrier() {
  group_->barrier(rank_, "barrier");
  return completed_work();
}

WorkHandle LocalCommunicator::send(const at::Tensor& tensor, int to, int tag) {
  group_->send(rank_, tensor, to, tag);
  return completed_work();
}

WorkHandle LocalCommunicator::recv(at::Tensor& tensor, int from, int tag) {
  group_->recv(rank_, tensor, from, tag);
  return completed_work();
}

std::vector<std::string> LocalCommunicator::exchange(const std::string& key,
                                                     const std::string& value) {
  return group_->exchange(rank_, key, value);
}

std::vector<std::unique_ptr<LocalCommunicator>> make_local_group(const LocalGroupOptions& options) {
  DIST_CHECK_ARG(options.size >= 1, "a local group needs at least one member, got ", options.size);
  auto group = std::make_shared<LocalGroup>(options);
  std::vector<std::unique_ptr<LocalCommunicator>> members;
  for (int r = 0; r < options.size; ++r)
    members.push_back(std::make_unique<LocalCommunicator>(group, r));
  return members;
}

}  // namespace dist::collective
