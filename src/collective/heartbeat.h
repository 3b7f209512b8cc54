// Heartbeat: this member's sign of life in the rendezvous store, for any backend. Twice a
// second, from its own thread and connection (the main one may be blocked in a long wait), it
// bumps "alive/<name>" and publishes "issued/<name>", how many collectives this member has
// issued; liveness.h reads both to tell a lost member from one that is behind. Rank 0 also
// prints whom the store turned away (store_protocol.h, kRefusalLogKey), every 2 s and at the
// end.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "collective/process_group_spec.h"

namespace dist::collective {

class JobStore;

// How long members' heartbeats have stood still, as seen through `store`: each counter
// ("alive/<name>") against what it was when this watch first read it or last saw it move. The
// elastic membership tells a lost member by it, a later generation's rendezvous one that will
// not come, and liveness (after a failed collective) the members that stopped responding.
class HeartbeatWatch {
 public:
  explicit HeartbeatWatch(JobStore& store) : store_(store) {}
  // Since when member `name`'s counter has not moved; a missing counter counts as one that
  // does not move.
  std::chrono::steady_clock::duration still_for(const std::string& name);

 private:
  struct Seen {
    int64_t beats;
    std::chrono::steady_clock::time_point since;
  };
  JobStore& store_;
  std::map<std::string, Seen> seen_;
};

class Heartbeat {
 public:
  // Starts beating; `issued` (owned by the caller, outliving this) is read at each beat.
  Heartbeat(const ProcessGroupSpec& spec, const std::atomic<int64_t>& issued);
  ~Heartbeat() { stop(); }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Stops and joins the thread; idempotent. Outside an elastic job, also tells the store that
  // this member left ("left/<name>"), so that its host closes without waiting for the beat to
  // go stale.
  void stop();

 private:
  void loop();
  // Prints the refusal log's lines numbered above `shown`; returns the last number printed.
  int64_t print_refusals(const std::string& log, int64_t shown) const;

  const ProcessGroupSpec& spec_;  // the owner's, which outlives this
  const std::atomic<int64_t>& issued_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace dist::collective
