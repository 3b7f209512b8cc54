#include "collective/factory.h"

#include "collective/gloo/gloo_transport.h"
#include "collective/process_communicator.h"
#include "collective/shm/same_host_communicator.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

struct Backend {
  const char* name;     // CommunicationOptions::backend
  const char* display;  // in messages: "connecting the Gloo process group"
  MakeTransport make;
};

bool on_one_host(const ProcessGroupSpec& spec) {
  for (const auto& member : spec.members)
    if (member.address.host != spec.members[0].address.host) return false;
  return true;
}

// One line per backend: its transport. Everything else a member needs is composed around it
// (process_communicator.h). (NCCL would go here, in a CUDA build.)
constexpr Backend kBackends[] = {
    {"gloo", "Gloo", &make_gloo_transport},
};

}  // namespace

std::unique_ptr<Communicator> make_process_communicator(const std::string& backend,
                                                        const ProcessGroupSpec& spec) {
  for (const auto& b : kBackends) {
    if (backend != b.name) continue;
    std::unique_ptr<Communicator> made =
        std::make_unique<ProcessCommunicator>(spec, b.display, b.make);
    // Processes of one host share memory whatever the backend between them.
    if (!spec.same_host_shared_memory || spec.members.size() < 2 || !on_one_host(spec)) return made;
    return std::make_unique<SameHostCommunicator>(std::move(made), spec.shared_memory_slot_bytes,
                                                  spec.collective_timeout);
  }
  std::string known;
  for (const auto& b : kBackends) known += (known.empty() ? "" : ", ") + std::string(b.name);
  throw InvalidArgument("unknown collective backend '" + backend + "': this build has " + known);
}

}  // namespace dist::collective
