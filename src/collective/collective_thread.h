// A communicator whose collectives run on one thread of their own, in the order they were
// called, around another one that completes its collectives in the call (the rings of
// send/recv of all_gather_into and reduce_scatter between processes).
//
// ZeRO stage 3 gathers the next layer's parameters while this one computes (prefetch): the
// call returns at once and the ring runs here meanwhile. Every cross-process collective of the
// group goes through this one queue, so the order of issue on every member is still the order
// of the calls, as the mutex of a serialized communicator keeps it; only the caller no longer
// waits for the ring unless it waits for the Work.
#pragma once

#include <memory>

#include "collective/communicator.h"

namespace dist::collective {

// `inner` (borrowed: it outlives the result) behind one thread that issues and completes every
// collective in call order. Point to point (tagged) and the store's exchange go straight to
// `inner`. After a collective fails, every later one fails with the same error.
std::unique_ptr<Communicator> on_collective_thread(Communicator& inner);

}  // namespace dist::collective
