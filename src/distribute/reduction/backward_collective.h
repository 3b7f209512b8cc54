// Collectives issued from inside a backward pass: the gradient of ReplicaContext::all_reduce
// (replica_context.h) all-reduces the gradient while autograd runs. The strategy completes a
// step's open gradient packs before other collectives reach the other processes, so that a
// collective issued after backward follows the packs everywhere; a collective inside backward
// must not (its replicas' backward is still producing gradients), and needs not: every
// replica's backward issues the packs and the collective in the same autograd order
// (docs/design.md, "Collectives inside forward and backward").
#pragma once

namespace dist {

// Marks the calling thread as issuing a collective from inside backward for its lifetime.
class BackwardCollectiveScope {
 public:
  BackwardCollectiveScope();
  ~BackwardCollectiveScope();
  BackwardCollectiveScope(const BackwardCollectiveScope&) = delete;
  BackwardCollectiveScope& operator=(const BackwardCollectiveScope&) = delete;
};

// Whether the calling thread is inside a BackwardCollectiveScope.
bool in_backward_collective();

}  // namespace dist
