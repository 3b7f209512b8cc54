// A Transport over the threads of this process (a LocalCommunicator), counting what each member
// sends: the backend-neutral pieces (agreement.h, ring_reduce_scatter.h) tested without a
// network.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "collective/communicator.h"
#include "collective/transport.h"

namespace dist::collective::testing {

class LocalTransport : public Transport {
 public:
  explicit LocalTransport(Communicator& member) : member_(member) {}

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    return member_.all_reduce(tensors, op);
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    return member_.broadcast(tensors, root);
  }
  WorkHandle all_gather(const at::Tensor& input, std::vector<at::Tensor>* outputs) override {
    at::Tensor all;
    member_.all_gather(input, &all)->wait();
    const int64_t rows = input.size(0);
    for (size_t r = 0; r < outputs->size(); ++r)
      (*outputs)[r].copy_(all.narrow(0, static_cast<int64_t>(r) * rows, rows));
    return completed_work();
  }
  WorkHandle barrier() override { return member_.barrier(); }
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    bytes_sent += tensor.nbytes();
    ++messages_sent;
    return member_.send(tensor, to, tag);
  }
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override {
    return member_.recv(tensor, from, tag);
  }
  void close() override { closed = true; }

  int64_t bytes_sent = 0;
  int64_t messages_sent = 0;
  bool closed = false;

 private:
  Communicator& member_;
};

}  // namespace dist::collective::testing
