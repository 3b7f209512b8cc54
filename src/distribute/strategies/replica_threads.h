// ReplicaThreads: one long-lived thread per local replica, each with its own share of the
// cores for LibTorch's intra-op parallelism.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dist {

class ReplicaThreads {
 public:
  // intra_op_threads: OpenMP threads each replica thread's tensor ops may use.
  ReplicaThreads(int count, int intra_op_threads);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // Runs body(r) on thread r for every replica and waits for all. When body throws,
  // on_error(r, error) is called at once on that thread (to abort collectives others may be
  // blocked in); the errors are returned, indexed by replica (null where none).
  std::vector<std::exception_ptr> run(const std::function<void(int)>& body,
                                      const std::function<void(int, std::exception_ptr)>& on_error);

  int size() const { return static_cast<int>(threads_.size()); }
  int intra_op_threads() const { return intra_op_threads_; }

 private:
  void loop(int replica);

  int intra_op_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_ready_, work_done_;
  const std::function<void(int)>* body_ = nullptr;
  const std::function<void(int, std::exception_ptr)>* on_error_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  uint64_t generation_ = 0;
  // When run() handed out the current bodies: a timeline's "dispatch" on each thread is the
  // wait from then until the thread started its body (a core to run on, mostly).
  std::chrono::steady_clock::time_point dispatched_;
  // When the last thread finished its body: the caller's "join" is the wait from then until it
  // woke up to go on (and the recording of the replicas' spans meanwhile).
  std::chrono::steady_clock::time_point finished_;
  int pending_ = 0;
  bool stopping_ = false;
};

}  // namespace dist
