#include "distribute/strategies/replica_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <string>

#include "core/timeline_recorder.h"

namespace dist {

ReplicaThreads::ReplicaThreads(int count, int intra_op_threads)
    : intra_op_threads_(intra_op_threads), errors_(static_cast<size_t>(count)) {
  for (int r = 0; r < count; ++r) threads_.emplace_back([this, r] { loop(r); });
}

ReplicaThreads::~ReplicaThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

std::vector<std::exception_ptr> ReplicaThreads::run(
    const std::function<void(int)>& body,
    const std::function<void(int, std::exception_ptr)>& on_error) {
  std::unique_lock<std::mutex> lock(mu_);
  body_ = &body;
  on_error_ = &on_error;
  std::fill(errors_.begin(), errors_.end(), nullptr);
  pending_ = size();
  ++generation_;
  dispatched_ = timeline_recording() ? std::chrono::steady_clock::now()
                                     : std::chrono::steady_clock::time_point{};
  finished_ = {};
  work_ready_.notify_all();
  work_done_.wait(lock, [this] { return pending_ == 0; });
  if (dispatched_ != std::chrono::steady_clock::time_point{})
    detail::record_span("join", "step", finished_, std::chrono::steady_clock::now());
  body_ = nullptr;
  on_error_ = nullptr;
  return errors_;
}

void ReplicaThreads::loop(int replica) {
  // OpenMP's thread count is per calling thread, so each replica thread gets its own share
  // of the cores; the caller's thread keeps its own setting. ATen re-initializes a thread's
  // count from a process-wide value on its first parallel op (lazy_init_num_threads), which
  // another strategy may have changed since: run that initialization first, then set ours.
  at::internal::lazy_init_num_threads();
  at::set_num_threads(intra_op_threads_);
  detail::name_timeline_thread("replica " + std::to_string(replica));
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const auto* body = body_;
    const auto* on_error = on_error_;
    const auto dispatched = dispatched_;
    lock.unlock();
    if (dispatched != std::chrono::steady_clock::time_point{})
      detail::record_span("dispatch", "step", dispatched, std::chrono::steady_clock::now());
    std::exception_ptr error;
    try {
      (*body)(replica);
    } catch (...) {
      error = std::current_exception();
      (*on_error)(replica, error);
    }
    const auto finished = std::chrono::steady_clock::now();
    lock.lock();
    errors_[static_cast<size_t>(replica)] = error;
    finished_ = std::max(finished_, finished);
    if (--pending_ == 0) work_done_.notify_all();
  }
}

}  // namespace dist
