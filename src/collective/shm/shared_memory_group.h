// SharedMemoryGroup: the processes of one host in one POSIX shared-memory segment, with a
// barrier between them that sleeps in the kernel (futex) instead of spinning, so a process that
// waits does not take the core its peer computes on.
//
// The segment holds a header (the barrier, who aborted and why), one control block per member
// (its process id, how many barriers it reached, the fingerprint of its current collective)
// and member_count + 1 data areas of slot_bytes each: one per member, and one for results.
// What goes in the data areas is the communicator's business (same_host_communicator.h).
//
// Forming: member 0 creates the segment under a random name and reserves its memory
// (posix_fallocate, so that a full /dev/shm is an error now, not a SIGBUS later); the others
// open it by that name; once every member mapped it, member 0 unlinks the name, so nothing is
// left in /dev/shm however the job ends. Who learns the name how is the caller's (a store).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective/fingerprint.h"
#include "collective/shm/shared_segment.h"

namespace dist::collective {

class SharedMemoryGroup {
 public:
  // Member 0: creates a segment for `members` members of `slot_bytes` data areas. Throws
  // std::runtime_error with the reason when the system refuses (no /dev/shm, too small).
  static SharedMemoryGroup create(int members, int64_t slot_bytes);
  // Any other member: maps the segment `name` that member 0 created.
  static SharedMemoryGroup open(const std::string& name, int rank);

  SharedMemoryGroup(SharedMemoryGroup&& other) noexcept = default;
  SharedMemoryGroup& operator=(SharedMemoryGroup&&) = delete;

  const std::string& name() const { return segment_.name(); }
  // Removes the name (member 0, once every member mapped it); the mapping stays.
  void unlink() { segment_.unlink(); }

  int rank() const { return rank_; }
  int size() const { return members_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  // Member `member`'s data area, and the result area.
  void* slot(int member) const;
  void* results() const;

  // Waits until every member arrived here as often as this one. `what` and `sequence` name the
  // collective in errors (the text is only built for one: this is the all-reduce's hot path);
  // `member_name` turns a rank into "worker:1 (host:port)". Throws CollectiveError when a member's
  // process ended ("lost worker"), a member called abort() (its reason), or `timeout` passed
  // (naming the members that did not arrive).
  void arrive_and_wait(const char* what, int64_t sequence, std::chrono::milliseconds timeout,
                       const std::function<std::string(int)>& member_name);

  // Publishes this member's fingerprint of collective `sequence`. Read after the next barrier:
  // fingerprint(member, sequence) until that member passed one more barrier.
  void publish(int64_t sequence, const Fingerprint& mine);
  Fingerprint fingerprint(int member, int64_t sequence) const;

  // Tells every member waiting or arriving later that this member failed for `reason`.
  void abort(const std::string& reason);
  // The member that aborted (or -1) and its reason.
  int aborted_by() const;
  std::string abort_reason() const;

 private:
  struct Header;
  struct Control;
  SharedMemoryGroup(SharedSegment segment, int rank) : segment_(std::move(segment)), rank_(rank) {}
  Header& header() const;
  Control& control(int member) const;
  // Members whose process ended, as "worker:1 (host:port)" names, or empty.
  std::string lost_members(const std::function<std::string(int)>& member_name) const;

  SharedSegment segment_;
  int rank_ = 0;
  int members_ = 0;
  int64_t slot_bytes_ = 0;
};

}  // namespace dist::collective
