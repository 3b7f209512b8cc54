// LocalCommunicator: the Communicator of one thread (rank) of a LocalGroup.
#pragma once

#include <memory>

#include "collective/communicator.h"
#include "collective/local/local_group.h"

namespace dist::collective {

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string member_name(int rank) const override { return group_->member_name(rank); }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle all_reduce_to_process_leader(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override;
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle barrier() override;
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override;
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override;
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override;

  LocalGroup& group() const { return *group_; }

 private:
  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

// `options.size` communicators over one new LocalGroup, element r with rank r.
std::vector<std::unique_ptr<LocalCommunicator>> make_local_group(const LocalGroupOptions& options);

}  // namespace dist::collective
