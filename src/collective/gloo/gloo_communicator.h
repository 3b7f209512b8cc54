// GlooCommunicator: Communicator over LibTorch's c10d ProcessGroupGloo (TCP), one member per
// process, with our own rendezvous store (collective/store/) at `store_address`. Rank 0 starts the
// store in its own process, dist-store-host (store_host.h), so that it outlives a crashed rank 0;
// with `store_in_process` (or without that binary) rank 0 hosts it itself.
//
// Start-up: every member connects to the store, starts its heartbeat and announces itself; a
// member that does not within the rendezvous timeout is reported by name ("worker:2 never
// joined"). Then the Gloo process group connects its full mesh.
//
// Liveness and diagnosis: each member bumps a heartbeat key in the store twice a second from
// its own thread and connection, and publishes how many collectives it has issued. When a
// collective fails (a peer's socket closed, the timeout or a wait's deadline passed), the
// heartbeats tell which member stopped ("lost"), and the published counts which live member
// never reached the collective.
//
// Calls are asynchronous (c10d work); Gloo pairs them by the order in which each member issues
// them, so callers issue collectives in the same order on every member (HierarchicalCommunicator
// does this for the replica threads of a process). The communicator must outlive its Work.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective/communicator.h"
#include "collective/fingerprint.h"
#include "collective/process_group_spec.h"

namespace c10d {
class Store;
class ProcessGroupGloo;
class Work;
}  // namespace c10d

namespace dist::collective {

class StoreServer;

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(ProcessGroupSpec options);
  ~GlooCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return static_cast<int>(options_.members.size()); }
  std::string member_name(int rank) const override;

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override;
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  WorkHandle barrier() override;
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override;
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override;
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override;
  // Publishes "failed/<this member>" = reason in the store, then closes this member's Gloo
  // connections so that peers blocked on it fail at once and read the reason.
  void abort(const std::string& reason) override;

  // Turns a failed collective into a CollectiveError naming the lost or missing members if it
  // can, and closes this member's Gloo connections (the communicator is unusable afterwards).
  [[noreturn]] void fail_collective(const std::string& what, int64_t sequence,
                                    const std::exception& error);

 private:
  void connect_store();
  void stop_heartbeat();
  void wait_for_all(const std::string& prefix, const char* what);
  void heartbeat_loop();
  // Prints the refusal log's lines numbered above `shown` (store_protocol.h, kRefusalLogKey);
  // returns the last number printed.
  int64_t print_refusals(const std::string& log, int64_t shown) const;
  void check_usable(const char* what) const;
  using C10dWork = c10::intrusive_ptr<c10d::Work>;
  // Issues one operation's c10d calls (`start`) as collective number `sequence` (0: point to
  // point, with no fingerprint); a failure while issuing is diagnosed as one while waiting.
  // `finish` runs once the work completed (MEAN's division, cutting gathered parts).
  WorkHandle issue(const std::string& what, int64_t sequence, const Fingerprint* fingerprint,
                   const std::function<std::vector<C10dWork>()>& start,
                   std::function<void()> finish = nullptr);
  // The agreement of ProcessGroupSpec::check_collectives: throws CollectiveError naming what
  // each member issued when they differ.
  void check_same_collective(const std::string& what, int64_t sequence, const Fingerprint& mine);
  // "worker:1 (host:port) failed: <reason>" for the members that called abort(), or empty.
  std::string failure_reports(c10d::Store& store) const;
  const Member& self() const { return options_.members[static_cast<size_t>(options_.rank)]; }
  // Numbers the next collective (published by the heartbeat for diagnosis).
  int64_t next_sequence() { return ++issued_; }

  ProcessGroupSpec options_;
  std::unique_ptr<StoreServer> server_;  // set when the store's server runs in this process
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::atomic<int64_t> issued_{0};
  std::atomic<bool> failed_{false};  // fail_collective ran
  std::atomic<bool> stopping_{false};
  std::thread heartbeat_;
};

}  // namespace dist::collective
