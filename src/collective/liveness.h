// Liveness: for any backend, what happens when a collective fails or this member gives up.
//
// A failed collective (a peer's socket closed, the timeout or a wait's deadline passed) becomes
// a CollectiveError that names the cause, found in the rendezvous store: a member that called
// abort() and published why; else a member whose heartbeat (heartbeat.h) stopped ("lost
// worker"); else a live member whose published count of issued collectives shows it never
// reached this one ("collective timeout"). Then this member's transport is closed, so that
// peers blocked on it fail at once and come to read the same store.
//
// The first survivor to diagnose a loss publishes a verdict; later ones (often blocked on a
// survivor that was busy diagnosing) reuse it. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "collective/heartbeat.h"
#include "collective/rendezvous.h"

namespace dist::collective {

class Liveness {
 public:
  // Starts the heartbeat. `rendezvous` outlives this.
  explicit Liveness(Rendezvous& rendezvous);

  // What closes the transport's connections (Transport::close), once it exists.
  void set_close(std::function<void()> close) { close_ = std::move(close); }

  // Numbers the next collective (from 1; 0 stands for point to point, outside the count).
  int64_t next_sequence() { return ++issued_; }

  // Throws the CollectiveError that explains why collective `what` number `sequence` failed
  // with `error`, after closing the transport. A second failure of the same member only says
  // that it failed earlier (the first one's error told the story).
  [[noreturn]] void fail(const std::string& what, int64_t sequence, const std::exception& error);
  // This member fails for `reason`: publish it, then close the transport. Once only.
  void abort(const std::string& reason);
  // Every member saw the same failure (a mismatch): none has more to tell the others.
  void mark_failed() { failed_ = true; }
  bool failed() const { return failed_; }
  // Throws the "failed earlier" CollectiveError once the transport is closed.
  void check_usable(const std::string& what) const;

  void stop_heartbeat() { heartbeat_.stop(); }

 private:
  void close_transport();
  // With the store's server in this process: keeps it up (bounded) until the members in
  // `alive` said they read the verdict, or they would blame this member for the lost store. (A
  // member that never issued the failed collective is not waited for: nothing of its own fails.)
  void wait_until_diagnosed(JobStore& store, const std::vector<int>& alive) const;

  Rendezvous& rendezvous_;
  const ProcessGroupSpec& spec_;
  std::atomic<int64_t> issued_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> closed_{false};
  std::function<void()> close_;
  Heartbeat heartbeat_;  // last: it reads issued_
};

}  // namespace dist::collective
