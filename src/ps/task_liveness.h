// When a ps or worker task stops serving: when the coordinator asks it to (Shutdown), or when
// the coordinator has not been heard from for the timeout (it is gone, and nobody else will
// stop this process). Every call from the coordinator counts as hearing from it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

namespace dist::ps {

// The name the coordinator signs its pings with (PingRequest.from); only its pings keep a task
// alive.
inline constexpr const char* kCoordinatorTask = "chief";

class TaskLiveness {
 public:
  enum class Ending { kShutdown, kCoordinatorLost, kStopRequested };

  explicit TaskLiveness(std::chrono::milliseconds coordinator_timeout)
      : timeout_(coordinator_timeout), last_heard_(std::chrono::steady_clock::now()) {}

  void heard_from_coordinator() {
    std::lock_guard<std::mutex> lock(mutex_);
    last_heard_ = std::chrono::steady_clock::now();
  }
  void shutdown() {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
    changed_.notify_all();
  }
  // Blocks until a Shutdown, until the coordinator has been silent for the timeout, or until
  // `stop_requested` (asked every 100 ms; may be empty) says to stop: a SIGTERM to a task that
  // waits for its chief must not wait out the whole timeout.
  Ending wait(const std::function<bool()>& stop_requested = nullptr) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (shutdown_) return Ending::kShutdown;
      if (stop_requested && stop_requested()) return Ending::kStopRequested;
      const auto now = std::chrono::steady_clock::now();
      const auto deadline = last_heard_ + timeout_;
      if (now >= deadline) return Ending::kCoordinatorLost;
      changed_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
    }
  }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::chrono::steady_clock::time_point last_heard_;
  bool shutdown_ = false;
};

}  // namespace dist::ps
