// ReplicaBarrier: the rendezvous of the replica threads of one process.
//
// Every in-process collective is built from barrier rounds. A round completes when all
// replicas have arrived; the last to arrive runs the round's completion action (checks,
// allocation, an optimizer step) before anyone is released. A round that does not complete
// within the timeout, or an abort (a replica threw), releases every waiter with a
// CollectiveError that names the replicas that are missing or the one that failed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dist::collective {

class ReplicaBarrier {
 public:
  // `place`: where the replicas are, for messages (" of worker:1 (10.0.0.2:2222)"; empty in a
  // job of one process).
  ReplicaBarrier(int parties, std::chrono::milliseconds timeout, std::string place = "");

  // Waits until all parties arrived at this round. `what` names the collective in errors.
  // on_complete runs once, in the last arriving thread, before anyone is released; if it
  // throws, the barrier is aborted with its message and every party throws.
  void arrive_and_wait(int party, const char* what,
                       const std::function<void()>& on_complete = nullptr);

  // Releases all current and future waiters with CollectiveError(reason), until reset().
  void abort(const std::string& reason);
  // Clears an abort and any half-completed round, for the next run().
  void reset();
  bool aborted() const;

  int parties() const { return parties_; }

 private:
  [[noreturn]] void throw_aborted() const;

  const int parties_;
  const std::chrono::milliseconds timeout_;
  const std::string place_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::vector<bool> arrived_;
  int arrived_count_ = 0;
  uint64_t generation_ = 0;
  std::optional<std::string> abort_reason_;
};

}  // namespace dist::collective
