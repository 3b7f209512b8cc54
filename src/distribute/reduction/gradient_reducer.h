// GradientReducer: sums the gradients of every replica of the sync group before the
// optimizer step (Flashlight's Reducer is the model).
//
//   add(replica, parameter)   as each replica's gradient of a parameter becomes final
//                             (autograd hooks call it; the inline reducer ignores it);
//   finalize(replica, landed) in apply_gradients, from every local replica's thread: returns
//                             once replica 0's .grad tensors hold the sums over all replicas.
//                             A reducer whose packs land one by one (landing_packs() is not
//                             empty) calls `landed(k)` on one thread as pack k's sums reach
//                             replica 0's gradients, in pack order, while later packs may still
//                             be on their way; the others never call it.
//
// The strategy takes the optimizer step itself, the reducer never does: once finalize returns,
// or pack by pack from `landed` (the step by packs, optimizer_step_plan.h).
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
#include "dist/distribute/communication_hook.h"

namespace dist {

// Called with the index of a pack whose sums have just reached replica 0's gradients.
using PackLanded = std::function<void(size_t pack)>;

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  virtual void add(int replica, size_t parameter) = 0;
  // `landed` may be empty.
  virtual void finalize(int replica, const PackLanded& landed) = 0;
  // Replica 0's parameters of each pack that finalize reports landing, in pack order; empty for
  // a reducer that reports none.
  virtual std::vector<std::vector<at::Tensor>> landing_packs() const { return {}; }
  // A run() ended: forget a step whose backward ran without reaching finalize.
  virtual void settle() {}
  // Before another collective reaches the processes during a step (every local replica is
  // waiting at it): gradients not yet final count as final, so their packs go out first.
  virtual void complete_step() {}
};

// How one pack of gradients, already summed over this process's replicas into one flat
// buffer (pack.buffer), crosses the processes: an all-reduce SUM of the buffer in place by
// default (all_reduce_pack), or a CommunicationHook (communicate_through). A replacement must
// leave every process's buffer with the same sums (or the same approximation of them) when its
// work is waited for, and issue its collectives in pack order like the default.
using PackCommunication = std::function<collective::WorkHandle(
    collective::Communicator& cross_process, GradientPack& pack)>;
collective::WorkHandle all_reduce_pack(collective::Communicator& cross_process, GradientPack& pack);
// Packs of fewer than `min_bytes` bytes (-1: hook->min_pack_bytes()) cross as all_reduce_pack
// instead of through the hook.
PackCommunication communicate_through(std::shared_ptr<CommunicationHook> hook,
                                      int64_t min_bytes = 0);

// How an overlapped reducer's packs cross the processes, and where their sums land.
struct PackExchange {
  PackCommunication communicate = all_reduce_pack;
  // Each pack's sums are copied into replica 0's gradients as it lands. false: the
  // communication leaves this process's part of them elsewhere (the chunks of a sharded step,
  // sharded_step.h), and replica 0's gradients are left as backward made them.
  bool lands_in_gradients = true;
  // The replicas' gradients are freed once summed into their pack's buffer, and the buffer once
  // the pack has landed (both are made again by the next step): what Sharding::kGradients saves
  // between steps.
  bool frees_gradients = false;
  // With frees_gradients: at most this many packs' buffers wait for their communication while
  // backward goes on (0: no bound). Issuing one more first waits for the oldest and frees it,
  // so a communication running behind backward holds a few packs, not every gradient.
  size_t packs_in_flight = 0;
  // Packs go out only once backward is over, each in turn as finalize reaches it, instead of as
  // soon as backward completes them: for communicators whose collectives complete inside the
  // call (shared memory), where a pack sent during backward would hold backward up until the
  // slowest worker arrived.
  bool after_backward = false;
  // Replica 0's gradients are views of their pack's buffer, so backward accumulates straight
  // into it: no copy per pack and no second copy of the gradients in memory. Only for an
  // exchange that reads the buffer without writing it (a reduce-scatter into chunks kept
  // elsewhere); replica 0's gradients then hold the sum of this process's replicas once the
  // pack is complete.
  bool gradients_in_pack = false;
  // Called once a pack's gradients are final and summed in this process (backward ran every
  // node that reads its parameters), with `model` (GradientPack::model) and replica 0's
  // parameters of the pack, before the pack goes out. Stage 3 releases them (parameter_shards.h).
  std::function<void(int model, const std::vector<at::Tensor>& params)> summed;
};

// Parameter indices per pack.
std::vector<std::vector<size_t>> make_packs(const std::vector<at::Tensor>& params, int64_t bytes);

// Reduces every pack when finalize is called, through each replica's communicator
// (all_reduce_to_process_leader: in process, then across processes).
std::unique_ptr<GradientReducer> make_inline_reducer(
    std::vector<std::vector<at::Tensor>> params,  // [replica][parameter]
    std::vector<collective::Communicator*> communicators, int64_t bytes_per_pack);

}  // namespace dist
