// Communicator: collectives among the worker processes of a job (one member per process).
// Implementations: GlooCommunicator (TCP, through LibTorch's c10d). Calls are blocking and
// bounded by the communicator's timeout; a failure is a CollectiveError naming the lost
// worker where it can be identified.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/core/reduce_op.h"

namespace dist::collective {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Name of member `rank` for messages, e.g. "worker:1 (127.0.0.1:2223)".
  virtual std::string member_name(int rank) const = 0;

  // In place. Every member passes tensors of the same count, shapes and dtypes (contiguous,
  // CPU). MEAN divides by size().
  virtual void all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) = 0;
  // In place: every member ends with root's values.
  virtual void broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  // Every member's tensor (same shape everywhere), in rank order.
  virtual std::vector<at::Tensor> all_gather(const at::Tensor& tensor) = 0;
  virtual void barrier() = 0;

  // Publishes this member's `value` under `key` and returns every member's value, in rank
  // order. Used for start-up checks; bounded by the rendezvous timeout.
  virtual std::vector<std::string> exchange(const std::string& key, const std::string& value) = 0;
};

}  // namespace dist::collective
