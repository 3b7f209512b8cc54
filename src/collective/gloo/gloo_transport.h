// The Gloo backend: a Transport (collective/transport.h) over LibTorch's c10d ProcessGroupGloo,
// TCP between processes. It only moves data; ProcessCommunicator composes the rest (rendezvous,
// liveness, agreement, MEAN, uneven all_gather, reduce_scatter as a ring of its send/recv:
// LibTorch 1.13's ProcessGroupGloo has no reduce_scatter).
//
// Gloo connects its full mesh through the rendezvous store (under the prefix "gloo/"), binding
// to each member's configured host only. Collectives are paired by the order in which each
// member issues them; send/recv by peer and tag.
#pragma once

#include <chrono>
#include <memory>

#include "collective/process_group_spec.h"
#include "collective/rendezvous.h"
#include "collective/transport.h"

namespace dist::collective {

// Connects this member's Gloo mesh (blocks until every member connected). Installs the process
// guards of transport_guards.h for Gloo first.
std::unique_ptr<Transport> make_gloo_transport(const ProcessGroupSpec& spec,
                                               Rendezvous& rendezvous);

// How long this member's waits poll before they block. Polling pays only while every member of
// the group on this host has a core to itself: where they outnumber the `cores` the process
// may run on, a polling wait takes the core a peer needs to finish its part (measured: the 144
// checkpoint continuations of StrategyCheckpointMatrixTest, jobs of 2 to 4 processes on 2
// cores, spent 53 s of system time with polling, 30 s without, and took 18% longer). So such a
// group blocks at once. DIST_COLLECTIVE_POLL_MS overrides the choice (0: never poll) for
// machines whose cores other work shares, such as a test suite running jobs side by side;
// a value that is not a whole number from 0 to 60000 is an InvalidArgument naming it.
std::chrono::milliseconds gloo_poll_before_blocking(const ProcessGroupSpec& spec, int cores);

}  // namespace dist::collective
