#include "collective/shm/shared_memory_group.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "core/process_state.h"
#include "dist/core/error.h"

namespace dist::collective {

// The futex word must be a plain 32-bit integer in the shared mapping.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the barrier needs lock-free 32-bit atomics");
static_assert(std::atomic<int64_t>::is_always_lock_free, "control blocks need lock-free atomics");

namespace {

constexpr uint64_t kMagic = 0x3153'4d48'5453'4944;  // "DISTHMS1"
constexpr size_t kAlign = 64;
constexpr size_t kReasonBytes = 512;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// This process's pid namespace: process ids of members in another one mean nothing here.

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds at_most) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(at_most.count() / 1000);
  ts.tv_nsec = static_cast<long>(at_most.count() % 1000) * 1000000L;
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

struct SharedMemoryGroup::Header {
  uint64_t magic;
  int32_t members;
  int64_t slot_bytes;
  alignas(kAlign) std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;  // the futex word: bumped when the last member arrives
  alignas(kAlign) std::atomic<int32_t> aborted_by;  // the first member to abort, or -1
};

struct SharedMemoryGroup::Control {
  alignas(kAlign) std::atomic<int64_t> pid;
  std::atomic<uint64_t> pid_namespace;
  std::atomic<int64_t> arrivals;  // barriers this member reached
  // Two fingerprints by collective parity: a member writes the next one while slower members
  // may still read its current one.
  std::atomic<int64_t> fingerprint[2][4];
  char abort_reason[kReasonBytes];  // written before the member claims Header::aborted_by
};

SharedMemoryGroup::Header& SharedMemoryGroup::header() const {
  return *static_cast<Header*>(segment_.data());
}

SharedMemoryGroup::Control& SharedMemoryGroup::control(int member) const {
  auto* first =
      reinterpret_cast<Control*>(static_cast<char*>(segment_.data()) + round_up(sizeof(Header)));
  return first[member];
}

void* SharedMemoryGroup::results() const {
  return static_cast<char*>(segment_.data()) + round_up(sizeof(Header)) +
         round_up(sizeof(Control) * static_cast<size_t>(members_));
}

void* SharedMemoryGroup::slot(int member) const {
  return static_cast<char*>(results()) + static_cast<size_t>(slot_bytes_) * (member + 1);
}

namespace {

size_t segment_bytes(int members, int64_t slot_bytes, size_t header, size_t control) {
  return round_up(header) + round_up(control * static_cast<size_t>(members)) +
         static_cast<size_t>(slot_bytes) * static_cast<size_t>(members + 1);
}

}  // namespace

SharedMemoryGroup SharedMemoryGroup::create(int members, int64_t slot_bytes) {
  DIST_CHECK_ARG(members >= 1, "a shared-memory group needs at least one member");
  DIST_CHECK_ARG(slot_bytes >= 64 && slot_bytes % 64 == 0,
                 "shared-memory slot bytes must be a positive multiple of 64, got ", slot_bytes);
  SharedMemoryGroup group(
      SharedSegment::create(segment_bytes(members, slot_bytes, sizeof(Header), sizeof(Control))),
      0);
  group.members_ = members;
  group.slot_bytes_ = slot_bytes;
  auto* header = new (group.segment_.data()) Header{};
  header->members = members;
  header->slot_bytes = slot_bytes;
  header->aborted_by.store(-1);
  for (int m = 0; m < members; ++m) new (&group.control(m)) Control{};
  header->magic = kMagic;  // last: an opener that sees it sees the rest
  std::atomic_thread_fence(std::memory_order_release);
  group.control(0).pid = getpid();
  group.control(0).pid_namespace = dist::detail::pid_namespace();
  return group;
}

SharedMemoryGroup SharedMemoryGroup::open(const std::string& name, int rank) {
  SharedSegment segment = SharedSegment::open(name);
  if (segment.bytes() < sizeof(Header))
    throw std::runtime_error("the shared-memory segment " + name + " is smaller than its header");
  SharedMemoryGroup group(std::move(segment), rank);
  std::atomic_thread_fence(std::memory_order_acquire);
  const Header& header = group.header();
  if (header.magic != kMagic)
    throw std::runtime_error("the shared-memory segment " + name + " is not a distribute group");
  group.members_ = header.members;
  group.slot_bytes_ = header.slot_bytes;
  if (rank <= 0 || rank >= group.members_ ||
      segment_bytes(group.members_, group.slot_bytes_, sizeof(Header), sizeof(Control)) >
          group.segment_.bytes())
    throw std::runtime_error(detail::concat("the shared-memory segment ", name, " has ",
                                            group.members_, " members; rank ", rank,
                                            " does not fit"));
  group.control(rank).pid = getpid();
  group.control(rank).pid_namespace = dist::detail::pid_namespace();
  return group;
}

std::string SharedMemoryGroup::lost_members(
    const std::function<std::string(int)>& member_name) const {
  std::string lost;
  const uint64_t mine = control(rank_).pid_namespace;
  for (int m = 0; m < members_; ++m) {
    const Control& c = control(m);
    const auto pid = static_cast<pid_t>(c.pid.load());
    if (m == rank_ || pid <= 0 || c.pid_namespace.load() != mine) continue;
    if (dist::detail::process_ended(pid))
      lost +=
          detail::concat(lost.empty() ? "" : ", ", member_name(m), " (process ", pid, " ended)");
  }
  return lost;
}

void SharedMemoryGroup::arrive_and_wait(const char* what_kind, int64_t sequence,
                                        std::chrono::milliseconds timeout,
                                        const std::function<std::string(int)>& member_name) {
  using Clock = std::chrono::steady_clock;
  Header& h = header();
  const int64_t arrival = control(rank_).arrivals.fetch_add(1) + 1;
  const uint32_t generation = h.generation.load(std::memory_order_acquire);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(members_)) {
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.fetch_add(1, std::memory_order_release);
    futex_wake_all(&h.generation);
    return;
  }
  auto passed = [&] { return h.generation.load(std::memory_order_acquire) != generation; };
  // Peers usually arrive within microseconds of each other: look briefly before sleeping.
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::microseconds(20))
    if (passed()) return;
  const auto deadline = start + timeout;
  const std::string what = detail::concat(what_kind, " (collective #", sequence, ")");
  auto next_check = start + std::chrono::milliseconds(100);
  while (!passed()) {
    futex_wait(&h.generation, generation, std::chrono::milliseconds(50));
    if (passed()) return;
    const int aborted = h.aborted_by.load();
    const auto now = Clock::now();
    if (now < next_check && aborted < 0) continue;
    next_check = now + std::chrono::milliseconds(100);
    // A lost member first: every survivor names it itself (a peer's abort may be about it).
    const std::string lost = lost_members(member_name);
    if (!lost.empty())
      throw CollectiveError(detail::concat("lost worker: ", lost, " stopped responding during ",
                                           what, " (seen by ", member_name(rank_), ")"));
    if (aborted >= 0 && aborted != rank_)
      throw CollectiveError(detail::concat(member_name(aborted), " failed: ", abort_reason(), "; ",
                                           member_name(rank_), " stops too (in ", what, ")"));
    if (now > deadline) {
      std::string behind;
      for (int m = 0; m < members_; ++m)
        if (control(m).arrivals.load() < arrival)
          behind += detail::concat(behind.empty() ? "" : ", ", member_name(m));
      abort(detail::concat("its collective timed out waiting for ", behind));
      throw CollectiveError(detail::concat("collective timeout: ", behind, " did not reach ", what,
                                           " within ", timeout.count() / 1000.0, " s while ",
                                           member_name(rank_),
                                           " waited; every member must issue the same "
                                           "collectives in the same order"));
    }
  }
}

void SharedMemoryGroup::publish(int64_t sequence, const Fingerprint& mine) {
  auto& f = control(rank_).fingerprint[sequence % 2];
  f[0] = mine.kind;
  f[1] = mine.elements;
  f[2] = mine.dtype;
  f[3] = mine.tensors;
}

Fingerprint SharedMemoryGroup::fingerprint(int member, int64_t sequence) const {
  const auto& f = control(member).fingerprint[sequence % 2];
  return {f[0].load(), f[1].load(), f[2].load(), f[3].load()};
}

void SharedMemoryGroup::abort(const std::string& reason) {
  Header& h = header();
  if (h.aborted_by.load() >= 0) return;  // the first reason stands
  char* mine = control(rank_).abort_reason;
  std::strncpy(mine, reason.c_str(), kReasonBytes - 1);
  mine[kReasonBytes - 1] = '\0';
  int32_t none = -1;
  // Sequentially consistent: whoever sees this member as the aborter sees its reason.
  if (h.aborted_by.compare_exchange_strong(none, rank_)) futex_wake_all(&h.generation);
}

int SharedMemoryGroup::aborted_by() const { return header().aborted_by.load(); }

std::string SharedMemoryGroup::abort_reason() const {
  const int member = aborted_by();
  return member < 0 ? std::string() : std::string(control(member).abort_reason);
}

}  // namespace dist::collective
