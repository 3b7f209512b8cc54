// Transport: what a cross-process backend implements, and all it implements: moving data
// between the members of a formed group. Everything else a member of a process group needs is
// backend-neutral and composed around the transport by ProcessCommunicator
// (process_communicator.h): the rendezvous store, heartbeats and the diagnosis of a lost or
// missing member, abort with a reason, the agreement on each collective, MEAN, all_gather of
// uneven sizes, reduce_scatter (a ring of send/recv, ring_reduce_scatter.h) and exchange.
//
// A transport is made once every member joined the rendezvous (factory.cc, one line per
// backend); it may use the rendezvous store to connect its own mesh (Gloo does).
//
// Errors: a transport throws whatever its library throws, from the call or from Work::wait;
// ProcessCommunicator turns it into a CollectiveError that names the lost or missing member.
// Its Work::wait(deadline) honours the deadline (kNoDeadline: the collective timeout given at
// construction).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

#include "collective/communicator.h"
#include "dist/core/reduce_op.h"

namespace dist::collective {

class Transport {
 public:
  virtual ~Transport() = default;

  // In place on every member; `op` is SUM, MIN or MAX (MEAN arrives as SUM).
  virtual WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) = 0;
  virtual WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  // Every member's `input`, of the same shape and dtype everywhere, into (*outputs)[rank]
  // (allocated by the caller, one per member).
  virtual WorkHandle all_gather(const at::Tensor& input, std::vector<at::Tensor>* outputs) = 0;
  virtual WorkHandle barrier() = 0;
  // Contiguous tensors; `tag` as in Communicator::send (any non-negative int).
  virtual WorkHandle send(const at::Tensor& tensor, int to, int tag) = 0;
  virtual WorkHandle recv(at::Tensor& tensor, int from, int tag) = 0;
  // A native reduce_scatter (Communicator::reduce_scatter's contract, MEAN arriving as SUM),
  // or null when the transport has none: then the ring of send/recv is used.
  virtual WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
    return nullptr;
  }
  // Drops this member's connections, so that peers blocked on it fail at once instead of at
  // their timeout. Called once, when this member fails or aborts; nothing is called after it.
  virtual void close() = 0;
};

}  // namespace dist::collective
