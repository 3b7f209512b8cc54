// GlooCommunicator: Communicator over LibTorch's c10d ProcessGroupGloo (TCP) with a c10d
// TCPStore for rendezvous at the address of collective rank 0 (the chief, or worker 0). Rank 0
// starts the store in its own process, dist-store-host (store_host.h), so that it outlives a
// crashed chief; without that binary, rank 0 hosts it in-process.
//
// Start-up: every member connects to the store, starts its heartbeat and announces itself; a
// member that does not within the rendezvous timeout is reported by name ("worker:2 never
// joined"). Then the Gloo process group connects its full mesh.
//
// Liveness: each member bumps a heartbeat key in the store twice a second from its own thread
// and connection. When a collective fails (a peer's socket closed, or the timeout passed),
// the heartbeats tell which member stopped, so the error can name it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "collective/communicator.h"
#include "dist/distribute/cluster_spec.h"

namespace c10d {
class Store;
class ProcessGroupGloo;
}  // namespace c10d

namespace dist::collective {

struct GlooOptions {
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(5);
  std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(2);
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const ClusterSpec& cluster, const TaskSpec& task, GlooOptions options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string member_name(int rank) const override;

  void all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root) override;
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor) override;
  void barrier() override;
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override;

 private:
  void connect_store();
  void stop_heartbeat();
  void wait_for_all(const std::string& prefix, const char* what);
  void heartbeat_loop();
  // Turns a failed collective into a CollectiveError naming the lost member if it can, and
  // closes this member's Gloo connections (the communicator is unusable afterwards).
  [[noreturn]] void fail_collective(const char* what, const std::exception& error);
  void check_usable(const char* what) const;

  ClusterSpec cluster_;
  TaskSpec task_;
  GlooOptions options_;
  std::vector<TaskSpec> members_;
  int rank_ = 0;
  bool hosts_store_ = false;  // the store's server runs in this process (the fallback)
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::atomic<bool> stopping_{false};
  std::thread heartbeat_;
};

}  // namespace dist::collective
