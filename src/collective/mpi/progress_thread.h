// ProgressThread: moves the MPI operations in flight while nobody waits for them.
//
// Open MPI moves data only inside MPI calls (its TCP transport has no thread of its own, and
// libnbc starts each round of a nonblocking collective from a test). So a gradient pack issued
// during backward, or one still crossing while the strategy steps an earlier pack's parameters
// (the step by packs), stood still until the caller waited for it. This thread tests every
// operation in flight once per kInterval: a socket buffer holds more than that much of a
// 1 Gbit/s link's data, so the link stays busy, and a test costs microseconds. It only moves
// them: what an operation does once complete (copying a staged result into place) stays with
// the thread that waits for it, under that thread's grad mode.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dist::collective {

// An operation the thread can move.
class Progressing {
 public:
  virtual ~Progressing() = default;
  // Moves the operation along; true once it needs nothing more from MPI. Must not throw.
  virtual bool advance() = 0;
};

class ProgressThread {
 public:
  static constexpr auto kInterval = std::chrono::milliseconds(1);

  ProgressThread();
  ~ProgressThread() { stop(); }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Advances `operation` every kInterval until it is done or dropped.
  void watch(const std::shared_ptr<Progressing>& operation);
  // Stops and joins the thread; idempotent. Works still in flight are left to their waiters.
  void stop();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::weak_ptr<Progressing>> in_flight_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dist::collective
