// CommunicationCounters: what a worker handed to the collectives between the worker processes
// and what it sends for them, counted by the library as the collectives are issued (in the
// collective layer, which issues them; a strategy reports them through
// strategy.extended().communication_counters()).
//
// bytes_sent is what the algorithms send by construction, not what a socket counted: an
// all-reduce of B bytes among N workers sends 2(N-1)/N x B (the ring's, and Gloo's, reduce-
// scatter then all-gather), a reduce-scatter (N-1)/N x B, an all-gather (N-1) x its input, a
// broadcast's root (N-1) x B, a send B. Protocol headers, the checks that make workers agree
// on each collective (CommunicationOptions::check_collectives) and the rendezvous are not in
// it; bench/hosts_scaling.sh sets it beside the bytes the network interface sent.
#pragma once

#include <cstdint>

namespace dist {

struct CommunicationCounters {
  int64_t collectives = 0;    // collectives and messages issued to the other workers
  int64_t payload_bytes = 0;  // bytes of the tensors handed to them
  int64_t bytes_sent = 0;     // bytes this worker sends for them (see above)
};

}  // namespace dist
