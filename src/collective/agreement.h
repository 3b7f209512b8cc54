// The agreement before each collective (ProcessGroupSpec::check_collectives), over any
// transport: the members compare what they are about to issue (fingerprint.h) in one small
// fixed-size all-reduce, so members that diverge get a CollectiveError naming what each issued
// instead of a transport that aborts the process on the first message of the wrong size (Gloo
// does). The cost is one round trip of 64 bytes per collective.
#pragma once

#include <cstdint>
#include <string>

#include "collective/fingerprint.h"
#include "collective/process_group_spec.h"
#include "collective/transport.h"

namespace dist::collective {

// Empty when every member of `spec` issued `mine` as collective number `sequence`; otherwise
// the message that names what each member issued (every member computes the same one). Throws
// whatever `transport` throws (a lost member: the caller diagnoses it).
std::string disagreement(Transport& transport, const ProcessGroupSpec& spec, int64_t sequence,
                         const Fingerprint& mine);

}  // namespace dist::collective
