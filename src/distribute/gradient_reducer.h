// GradientReducer: sums the gradients of every replica of the sync group before the
// optimizer step (Flashlight's Reducer is the model).
//
//   add(replica, parameter)   as each replica's gradient of a parameter becomes final
//                             (autograd hooks call it; the inline reducer ignores it);
//   finalize(replica)         in apply_gradients, from every local replica's thread: returns
//                             once replica 0's .grad tensors hold the sums over all replicas.
//
// The strategy then takes the optimizer step itself; the reducer never does.
//
// Gradients travel in packs (make_packs): runs of parameters of one dtype, about `bytes`
// each, from the last parameter to the first, the order backward produces them in.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "collective/communicator.h"

namespace dist {

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  virtual void add(int replica, size_t parameter) = 0;
  virtual void finalize(int replica) = 0;
  // A run() ended: forget a step whose backward ran without reaching finalize.
  virtual void settle() {}
  // Before another collective reaches the processes during a step (every local replica is
  // waiting at it): gradients not yet final count as final, so their packs go out first.
  virtual void complete_step() {}
};

// How one pack of gradients, already summed over this process's replicas into one flat
// buffer, crosses the processes: an all-reduce SUM of the buffer in place by default
// (all_reduce_pack). The point where gradient compression goes: a replacement must leave every
// process's buffer with the same sums (or the same approximation of them) when its work is
// waited for, and issue its collectives in pack order like the default.
using PackCommunication = std::function<collective::WorkHandle(
    collective::Communicator& cross_process, at::Tensor& pack)>;
collective::WorkHandle all_reduce_pack(collective::Communicator& cross_process, at::Tensor& pack);

// Parameter indices per pack.
std::vector<std::vector<size_t>> make_packs(const std::vector<at::Tensor>& params, int64_t bytes);

// Reduces every pack when finalize is called, through each replica's communicator
// (all_reduce_to_process_leader: in process, then across processes).
std::unique_ptr<GradientReducer> make_inline_reducer(
    std::vector<std::vector<at::Tensor>> params,  // [replica][parameter]
    std::vector<collective::Communicator*> communicators, int64_t bytes_per_pack);

}  // namespace dist
