// The collective backends, chosen by name. A new backend is one folder under src/collective
// implementing Transport (transport.h: data movement only), plus one line in the table in
// factory.cc; ProcessCommunicator composes the rest around it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/process_group_spec.h"

namespace dist::collective {

// A communicator between processes (one member per process) over `backend` ("gloo", "mpi"), in
// shared memory where every member is on this host and the spec asks for it (shm/, composed
// around any backend). Blocks until every member joined; throws InvalidArgument for an unknown
// backend and CollectiveError when the group cannot form (naming the member that never joined).
std::unique_ptr<Communicator> make_process_communicator(const std::string& backend,
                                                        const ProcessGroupSpec& spec);

// The backends this build has, for messages and --help: "gloo, mpi".
std::string built_backends();

// The group of this process alone: every collective is the identity (in-process strategies).
std::unique_ptr<Communicator> make_single_process_communicator();

}  // namespace dist::collective
