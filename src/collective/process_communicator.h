// ProcessCommunicator: a member of a group of processes (one member per process), composed of
// a Transport that only moves data (gloo/, one per backend) and the backend-neutral services
// around it:
//   - Rendezvous (rendezvous.h): the store every member connects to; joining, exchange;
//   - Liveness (liveness.h): heartbeats, the diagnosis that names a lost or missing member,
//     abort with a reason;
//   - the agreement on each collective (agreement.h), when ProcessGroupSpec::check_collectives;
//   - what a transport need not have: MEAN (a SUM, then divided), all_gather of uneven sizes
//     (sizes first, then padded parts), reduce_scatter (ring_reduce_scatter.h).
//
// Start-up: every member connects to the store, starts its heartbeat and announces itself; a
// member that does not within the rendezvous timeout is reported by name ("worker:2 never
// joined"). Then the transport connects (Gloo: its full mesh, through the store).
//
// Collectives are numbered in the order of issue (the heartbeat publishes the count, for
// diagnosis); point to point is tagged, not numbered. Calls are asynchronous where the
// transport's are (reduce_scatter over the ring completes in the call); transports pair
// collectives by the order in which each member issues them, so callers issue them in the same
// order on every member (HierarchicalCommunicator does this for the replica threads of a
// process). The communicator must outlive its Work.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/fingerprint.h"
#include "collective/liveness.h"
#include "collective/process_group_spec.h"
#include "collective/rendezvous.h"
#include "collective/transport.h"

namespace dist::collective {

// Makes a backend's transport once every member joined `rendezvous`.
using MakeTransport = std::unique_ptr<Transport> (*)(const ProcessGroupSpec&, Rendezvous&);

class ProcessCommunicator : public Communicator {
 public:
  // Blocks until every member joined and the transport connected. `transport_name` names the
  // transport in messages ("Gloo"), `backend` in the timeline (a string literal, "gloo").
  // Throws CollectiveError naming the member that never came.
  ProcessCommunicator(ProcessGroupSpec spec, const std::string& transport_name,
                      MakeTransport make_transport, const char* backend);
  ~ProcessCommunicator() override;

  int rank() const override { return spec_.rank; }
  int size() const override { return static_cast<int>(spec_.members.size()); }
  std::string member_name(int rank) const override;
  const char* backend_name() const override { return backend_; }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override;
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override;
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle barrier() override;
  // Tags from kFirstReservedTag on (ring_reduce_scatter.h) are the library's own.
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override;
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override;
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override;
  // Publishes "failed/<this member>" = reason in the store, then closes the transport so that
  // peers blocked on this member fail at once and read the reason.
  void abort(const std::string& reason) override;

 private:
  // Every member names its backend through the store; CollectiveError naming the first that
  // differs from member 0's.
  void agree_on_transport(const std::string& transport_name);
  // Makes transport_; a failure is diagnosed (Liveness), a stop signal passed on.
  void connect_transport(const std::string& transport_name, const MakeTransport& make_transport);
  // Every member's count of rows of `local`, in rank order (a small all-gather, waited for).
  std::vector<int64_t> gather_sizes(const at::Tensor& local);
  // Collective `what` described by `fingerprint` (null: point to point, not numbered): its
  // number, after the agreement. Throws CollectiveError when unusable or members disagree.
  int64_t begin(const std::string& what, const Fingerprint* fingerprint);
  // begin(), then run().
  WorkHandle issue(const std::string& what, const Fingerprint* fingerprint,
                   const std::function<WorkHandle()>& start,
                   std::function<void()> finish = nullptr);
  // A small sum of int64 values (agreement.h): carried by its own agreement, one round trip.
  WorkHandle all_reduce_within_agreement(std::vector<at::Tensor>& tensors, ReduceOp op,
                                         const Fingerprint& fingerprint);
  // `start` on the transport as collective `sequence`: its failure is diagnosed (Liveness), as
  // is the returned Work's. `finish` runs once the work completed (MEAN's division, ...).
  WorkHandle run(const std::string& what, int64_t sequence,
                 const std::function<WorkHandle()>& start, std::function<void()> finish = nullptr);

  ProcessGroupSpec spec_;
  Rendezvous rendezvous_;
  Liveness liveness_;
  const char* backend_;                   // backend_name()
  std::unique_ptr<Transport> transport_;  // last: closed and destroyed first
};

}  // namespace dist::collective
