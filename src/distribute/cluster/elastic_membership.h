// ElasticMembership: how the workers of an elastic job agree, through the job's rendezvous
// store, on who trains in the next generation after one was lost (docs/elastic.md).
//
// Store keys (outside every generation's scope):
//   elastic/<g>/staying/<name>  worker <name> of generation g goes on to generation g+1
//   elastic/<g>/next            the members of generation g+1, comma-separated: written once,
//                               by compare-and-set, by the first worker to decide
//   alive/<name>                its heartbeat counter, which this class bumps for the whole job
//                               (a generation's own heartbeat stops with its communicator)
//   elastic/process/<name>      the process behind it (process_state.h): on the same machine its
//                               end is seen at once, without waiting for its beat to go stale
//   elastic/running             set by the first generation's chief: a worker that starts later
//                               joins instead of starting the job
//   elastic/stopped             why the job stopped below its minimum (nobody to join)
//   elastic/finished            how the job finished (its last chief writes it)
//   left/<name>                 alive/<name>'s value when the worker's process left the job
//   closing                     set with elastic/stopped and elastic/finished (and by the
//                               store's host once every worker is gone): the job has ended
//   elastic/join-tickets        a counter: the tickets handed to workers asking to join
//   elastic/join/<n>            ticket n: the joiner's name, its process (process_state.h) and
//                               its settings, one per line (a ticket whose process ended is
//                               refused, not admitted)
//   elastic/join-requests       a counter: the tickets whose text is written
//   elastic/join-handled        the tickets a chief has answered
//   elastic/admitted/<n>        the answer: "<generation> <members> <previous members>" or
//                               "refused: <why>"
// A member of generation g is gone once its process ended (same machine) or its counter has not
// moved for kGoneAfter; the next
// generation is the members that said they stay, decided when every member of g either said so
// or is gone. Every survivor reads the same decision, so they all build the same group.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "collective/store_connection.h"

namespace dist::detail {

class ElasticMembership {
 public:
  // Connects to the job's store at `store` (the first generation started the built-in one; etcd
  // runs apart) as `self`; no heartbeat until start_heartbeat(). Throws
  // collective::StoreOfAnotherJob when the built-in store is another job's.
  ElasticMembership(collective::JobStoreAddress store, std::string self,
                    std::chrono::milliseconds timeout);
  // Once it has beaten: says that this worker left (left/<self>), so that the store's host
  // closes as soon as the job's last worker has, without waiting for its beat to go stale.
  ~ElasticMembership();
  ElasticMembership(const ElasticMembership&) = delete;
  ElasticMembership& operator=(const ElasticMembership&) = delete;

  // After generation `generation` of `members` failed on this worker: the members of the
  // next generation, agreed by every survivor (this worker among them unless the others decided
  // without it). Waits at most `wait_for_members` for a member that is alive but has not said
  // it stays (it may still be in the failed collective); then decides without it.
  std::vector<std::string> next_after_loss(int generation, const std::vector<std::string>& members,
                                           std::chrono::milliseconds wait_for_members);

  // Beats alive/<self> from now on, for the whole job (nothing if it does already), the first
  // beat before it returns. A worker that joins starts once admitted: its namesake's beat must
  // stop first, or the others could not tell that the lost worker is gone.
  void start_heartbeat();
  // A generation's chief, once it formed with `size` workers: later workers join instead of
  // starting the job, and the job's sizes read on (elastic/sizes/<g>).
  void mark_running(int generation, int size);
  // The job stopped below its minimum, for `why`: a worker of this job that comes to join
  // learns it at once. The store is closing from now on: a member of a later job on the same
  // addresses leaves it (Rendezvous::connect).
  void mark_stopped(const std::string& why);
  // Why the job stopped, if it did.
  std::optional<std::string> stopped();
  // The last generation's chief, once the job ended ("at step 150"): a worker still waiting to
  // join (it asked after the last step boundary that could admit it) learns it has nothing to
  // do. The store is closing from now on, as after mark_stopped.
  void mark_finished(const std::string& how);
  // How the job finished ("at step 150"), if it did.
  std::optional<std::string> finished();
  // The size of each generation up to `generation`, as their chiefs recorded them.
  std::vector<int> sizes(int generation);
  // Whether a worker that may join the group of `members` with `settings` waits (store round
  // trips); those that may not are refused on the way.
  bool join_requested(const std::vector<std::string>& members, const std::string& settings);
  // The chief of generation `generation` at a step boundary where the group regroups: answers
  // the waiting joiners (admitted when their settings equal `settings`; one whose name is a
  // member's waits, and those after it) and writes the next members. Returns them.
  std::vector<std::string> admit_joiners(int generation, const std::vector<std::string>& members,
                                         const std::string& settings);
  // The other members at that boundary: the next members the chief wrote; none if `chief` is
  // gone first (then the boundary becomes a loss: next_after_loss).
  std::optional<std::vector<std::string>> next_members(int generation, const std::string& chief);

  struct Admission {
    int generation = 0;
    std::vector<std::string> members;
    std::vector<std::string> previous;  // the members of the generation before
    // Set instead when the job finished before a step boundary admitted this worker.
    std::optional<std::string> finished;
    // Set instead when every worker of the job was lost (its store closed) before one admitted
    // this worker: there is no job to join, and this worker starts the job anew.
    bool job_gone = false;
  };

  // What a worker that starts finds at the job's store address.
  struct FoundJob {
    enum class State {
      kNone,     // no store, or one whose first generation has not formed: the job starts now
      kRunning,  // this job runs (its first generation formed): join it
      kEnded,    // a job ended there: `how` ("finished at step 10", or why it stopped)
      kAnother,  // the store is another job's, or closing: wait for it to go
    };
    State state = State::kNone;
    std::string how;
    bool stopped = false;  // kEnded: it stopped below its minimum (else it finished)
    // kEnded: the store's job has this worker's non-empty identity, so it is this job (a
    // worker started again just as the job ended), not a previous one on the same addresses.
    bool same_job = false;
  };
  // Looks at the store at `store` within `timeout` (a stop signal: StopRequested).
  static FoundJob find_job(const collective::JobStoreAddress& store,
                           std::chrono::milliseconds timeout);
  // A worker that took part in the first generation's start-up, which failed before the job
  // formed (no membership yet): says it left (collective::say_left), within 2 s, a stop
  // signal pending or not.
  static void leave_before_forming(const collective::JobStoreAddress& store,
                                   const std::string& self);
  // A worker that starts while the job runs: asks to join with `settings` ("flag=value" lines);
  // the ticket to wait on.
  int64_t ask_to_join(const std::string& settings);
  // Waits up to `wait` for the answer to `ticket` (or the job's end: Admission::finished).
  // Throws InvalidArgument with the chief's reason when refused, CollectiveError when no answer
  // comes or the job stopped.
  Admission await_admission(int64_t ticket, std::chrono::milliseconds wait);

  // A member stops counting as alive when its heartbeat has not moved for this long (four
  // missed beats).
  static constexpr std::chrono::milliseconds kGoneAfter{2000};

 private:
  void beat();
  void beat_into(collective::JobStore& store, bool connected);
  struct Ticket {
    std::string name;
    std::string refusal;  // why it may not join; empty: it may
    // Its name is a member's: it waits until that member is gone (a worker started again
    // before the others noticed the loss of its namesake; or a second process by mistake,
    // which then waits until its rendezvous timeout).
    bool member = false;
    // Counted by its joiner but not written yet: it and the tickets after it wait.
    bool pending = false;
  };
  Ticket read_ticket(int64_t n, const std::vector<std::string>& members,
                     const std::string& settings);
  // Answers ticket n with `text` and counts it handled.
  void answer(int64_t n, const std::string& text);

  std::string self_;
  collective::JobStoreAddress address_;
  c10::intrusive_ptr<collective::JobStore> store_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> beaten_{false};
  std::thread heartbeat_;
};

// "worker:0,worker:2" and back.
std::string join_names(const std::vector<std::string>& names);
std::vector<std::string> split_names(const std::string& text);

}  // namespace dist::detail
