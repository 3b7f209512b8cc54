#include "collective/factory.h"

#include "collective/gloo/gloo_communicator.h"
#include "collective/shm/same_host_communicator.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using MakeCommunicator = std::unique_ptr<Communicator> (*)(const ProcessGroupSpec&);

struct Backend {
  const char* name;
  MakeCommunicator make;
};

bool on_one_host(const ProcessGroupSpec& spec) {
  for (const auto& member : spec.members)
    if (member.address.host != spec.members[0].address.host) return false;
  return true;
}

std::unique_ptr<Communicator> make_gloo(const ProcessGroupSpec& spec) {
  return std::make_unique<GlooCommunicator>(spec);
}

// One line per backend. (NCCL would go here, in a CUDA build.)
constexpr Backend kBackends[] = {
    {"gloo", &make_gloo},
};

}  // namespace

std::unique_ptr<Communicator> make_process_communicator(const std::string& backend,
                                                        const ProcessGroupSpec& spec) {
  for (const auto& b : kBackends) {
    if (backend != b.name) continue;
    std::unique_ptr<Communicator> made = b.make(spec);
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
