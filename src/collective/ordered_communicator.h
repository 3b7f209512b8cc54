// OrderedCommunicator: a Communicator that runs `before_each` ahead of every collective.
//
// MultiWorkerMirroredStrategy sends gradient packs from a communication thread while backward
// runs (OverlappedReducer). Every other cross-worker collective goes through this wrapper,
// whose `before_each` sends the step's packs first, so each worker makes its Gloo calls in the
// same order (Gloo matches calls by their sequence on each member).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collective/communicator.h"

namespace dist::collective {

class OrderedCommunicator : public Communicator {
 public:
  OrderedCommunicator(Communicator& inner, std::function<void()> before_each)
      : inner_(inner), before_each_(std::move(before_each)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string member_name(int rank) const override { return inner_.member_name(rank); }

  void all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    before_each_();
    inner_.all_reduce(tensors, op);
  }
  void broadcast(std::vector<at::Tensor>& tensors, int root) override {
    before_each_();
    inner_.broadcast(tensors, root);
  }
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor) override {
    before_each_();
    return inner_.all_gather(tensor);
  }
  void barrier() override {
    before_each_();
    inner_.barrier();
  }
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override {
    return inner_.exchange(key, value);  // the store, not Gloo: no order to keep
  }

 private:
  Communicator& inner_;
  std::function<void()> before_each_;
};

}  // namespace dist::collective
