// A process group's connection to its rendezvous store: what the rendezvous, the heartbeat and
// the liveness watch each open (apart, so that none of them waits behind another's request).
#pragma once

#include <chrono>

#include <c10/util/intrusive_ptr.h>

#include "collective/process_group_spec.h"
#include "collective/store/store_client.h"

namespace dist::collective {

// A new connection to the store of `spec`, under the group's key scope, waiting up to `timeout`
// for it.
c10::intrusive_ptr<StoreClient> connect_to_store(const ProcessGroupSpec& spec,
                                                 std::chrono::milliseconds timeout);

}  // namespace dist::collective
