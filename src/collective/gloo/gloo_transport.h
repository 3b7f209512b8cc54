// The Gloo backend: a Transport (collective/transport.h) over LibTorch's c10d ProcessGroupGloo,
// TCP between processes. It only moves data; ProcessCommunicator composes the rest (rendezvous,
// liveness, agreement, MEAN, uneven all_gather, reduce_scatter as a ring of its send/recv:
// LibTorch 1.13's ProcessGroupGloo has no reduce_scatter).
//
// Gloo connects its full mesh through the rendezvous store (under the prefix "gloo/"), binding
// to each member's configured host only. Collectives are paired by the order in which each
// member issues them; send/recv by peer and tag.
#pragma once

#include <memory>

#include "collective/process_group_spec.h"
#include "collective/rendezvous.h"
#include "collective/transport.h"

namespace dist::collective {

// Connects this member's Gloo mesh (blocks until every member connected). Installs the process
// guards of transport_guards.h for Gloo first.
std::unique_ptr<Transport> make_gloo_transport(const ProcessGroupSpec& spec,
                                               Rendezvous& rendezvous);

}  // namespace dist::collective
