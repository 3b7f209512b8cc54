#include "collective/factory.h"

#include "dist/collective/collective_backends.h"

#include "collective/backends_built.h"
#include "collective/gloo/gloo_transport.h"
#if DIST_HAVE_MPI
#include "collective/mpi/mpi_transport.h"
#endif
#include "collective/process_communicator.h"
#include "collective/shm/same_host_communicator.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

struct Backend {
  const char* name;     // CommunicationOptions::backend
  const char* display;  // in messages: "connecting the Gloo process group"
  MakeTransport make;   // null: not in this build
  const char* how_to_build;
};

bool on_one_host(const ProcessGroupSpec& spec) {
  for (const auto& member : spec.members)
    if (member.address.host != spec.members[0].address.host) return false;
  return true;
}

#if DIST_HAVE_MPI
constexpr MakeTransport kMpiTransport = &make_mpi_transport;
#else
constexpr MakeTransport kMpiTransport = nullptr;
#endif

// One line per backend: its transport. Everything else a member needs is composed around it
// (process_communicator.h). (NCCL would go here, in a CUDA build.)
constexpr Backend kBackends[] = {
    {"gloo", "Gloo", &make_gloo_transport, ""},
    {"mpi", "MPI", kMpiTransport,
     "it is built when CMake finds an MPI library (apt-get install libopenmpi-dev, then build "
     "again)"},
};

}  // namespace

std::unique_ptr<Communicator> make_process_communicator(const std::string& backend,
                                                        const ProcessGroupSpec& spec) {
  for (const auto& b : kBackends) {
    if (backend != b.name) continue;
    DIST_CHECK_ARG(b.make != nullptr, "the collective backend '", backend,
                   "' is not in this build: ", b.how_to_build);
    std::unique_ptr<Communicator> made =
        std::make_unique<ProcessCommunicator>(spec, b.display, b.make, b.name);
    // Processes of one host share memory whatever the backend between them.
    if (!spec.same_host_shared_memory || spec.members.size() < 2 || !on_one_host(spec)) return made;
    return std::make_unique<SameHostCommunicator>(std::move(made), spec.shared_memory_slot_bytes,
                                                  spec.collective_timeout);
  }
  throw InvalidArgument("unknown collective backend '" + backend + "': this build has " +
                        built_backends());
}

std::string built_backends() {
  std::string known;
  for (const auto& name : collective_backends()) known += (known.empty() ? "" : ", ") + name;
  return known;
}

}  // namespace dist::collective

namespace dist {

std::vector<std::string> collective_backends() {
  std::vector<std::string> built;
  for (const auto& b : collective::kBackends)
    if (b.make != nullptr) built.emplace_back(b.name);
  return built;
}

}  // namespace dist
