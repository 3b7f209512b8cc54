// The MPI backend: a Transport (collective/transport.h) over the MPI library the build found
// (Debian's Open MPI), for jobs started by mpirun. It only moves data; ProcessCommunicator
// composes the rest around it (rendezvous store, heartbeats and the naming of a lost member,
// agreement, MEAN, uneven all_gather), as for Gloo.
//
// What MPI gives that the Gloo transport lacks: a native reduce_scatter (MPI_Ireduce_scatter),
// and the transports an MPI installation is tuned for (TCP here; shared memory, InfiniBand or
// OmniPath on clusters), chosen by MPI's own settings (--mca btl ...).
//
// Ranks: MPI's processes are the group's members. The job must run one MPI process per member
// (mpirun -np N); the transport orders them by the member's rank (MPI_Comm_split), so MPI's rank
// numbering need not agree with the cluster's. MPI is initialized once per process (thread
// level MPI_THREAD_MULTIPLE: replica threads and the gradient reducer issue concurrently) and
// finalized at exit.
//
// Waiting: every call is MPI's nonblocking one (MPI_I*); Work::wait tests it until done or the
// deadline, so a stalled peer is a timeout that Liveness then explains, never a hang inside MPI.
// When a member closes its transport (it failed), it sends every peer a notice on a
// communicator of its own; a peer waiting on anything fails at once and reads the reason from
// the store, as Gloo's closed sockets make it.
//
// What MPI does on its own: when an MPI process dies, mpirun (Open MPI's runtime) ends the
// whole job itself, printing which rank exited; see docs/clusters.md.
#pragma once

#include <memory>

#include "collective/process_group_spec.h"
#include "collective/rendezvous.h"
#include "collective/transport.h"

namespace dist::collective {

// Joins this process's MPI world as member spec.rank. Throws InvalidArgument when the process
// was not started by an MPI launcher or the world's size is not the group's.
std::unique_ptr<Transport> make_mpi_transport(const ProcessGroupSpec& spec, Rendezvous& rendezvous);

}  // namespace dist::collective
