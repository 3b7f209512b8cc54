// How a job takes its key prefix in an etcd rendezvous. The built-in store starts empty with
// each job and closes with it; etcd keeps a job's keys after it ends. So the chief of a job's
// first generation, before anyone joins, makes the prefix its job's: a previous job's keys are
// erased once nothing of that job beats any more (every heartbeat counter is leased:
// etcd_store.h), and "job" names the job that holds the prefix.
#pragma once

#include "collective/process_group_spec.h"

namespace dist::collective::etcd {

// The key that names the job holding the prefix: its identity (ProcessGroupSpec::job_id,
// possibly empty). The other members write nothing before it is there and theirs.
constexpr char kJobKey[] = "job";

// What a member of `spec` other than the chief reads before it joins under the prefix, from one
// snapshot of it (a single range read). Key by key, a member could read a previous job's "job"
// key just before the chief erased it and find its own "joined" key gone just after: it joined
// and beat under a prefix the chief then took for a previous job's still beating, and each
// waited for the other until the rendezvous timeout.
struct JoinView {
  // Why the prefix is not this job's yet ("" when it is): no job, another identity's, or a
  // previous run's whose chief is listed as joined but no longer beats.
  std::string unclaimed;
  bool self_joined = false;  // this member's "joined" key of the group's scope is there
  bool closing = false;      // the store's closing key is there
};
JoinView view_before_joining(const ProcessGroupSpec& spec);

// Whether any member's heartbeat counter is still leased under the prefix of `address` (some
// process of the job that holds it is alive).
bool anything_beats(const RendezvousAddress& address);

// Makes spec.rendezvous's prefix this job's, waiting up to the rendezvous timeout while a
// previous job there still beats. Nothing to do when the prefix is empty or already holds this
// job forming (same identity, not ended, the chief not yet joined). CollectiveError naming the
// prefix and the members that still beat when the timeout passes; etcd's own errors (no quorum)
// as CollectiveError.
void claim_prefix(const ProcessGroupSpec& spec);

}  // namespace dist::collective::etcd
