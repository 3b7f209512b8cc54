// The collective backends this build has: the names CommunicationOptions::backend
// (multi_worker_mirrored_strategy.h) accepts here, so that a program, or its --help, offers
// only those. Which ones exist is fixed when the library is built: MPI's only where CMake found
// an MPI library.
#pragma once

#include <string>
#include <vector>

namespace dist {

// "gloo", then "mpi" when this build has it. Thread-safe; the same list on every call.
std::vector<std::string> collective_backends();

}  // namespace dist
