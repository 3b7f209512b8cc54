// What the MPI transport needs from the MPI library, apart from moving data: initializing it
// once per process, finalizing it at exit, MPI's names for dtypes and reductions, and its errors
// as exceptions. Only mpi_transport.cc includes this (and so mpi.h).
#pragma once

#include <mpi.h>

#include <string>

#include <ATen/core/Tensor.h>

#include "dist/core/reduce_op.h"

namespace dist::collective::mpi {

// Initializes MPI with MPI_THREAD_MULTIPLE unless the program did (then checks its level), and
// finalizes it at exit unless a transport failed with operations still in flight (finalizing
// would wait for them forever; mpirun reports the exit instead). Throws InvalidArgument when this
// process was not started by an MPI launcher.
void initialize_once();

// A transport of this process failed: do not finalize at exit.
void mark_failed();

// Throws std::runtime_error "MPI <call> failed: <MPI's message>" unless `code` is MPI_SUCCESS.
void check(int code, const char* call);

// The MPI datatype of a dtype that MPI can reduce; Half and BFloat16 have none (reduced as
// float, see mpi_transport.cc). Throws InvalidArgument for a dtype MPI cannot reduce.
MPI_Datatype reducible_type(at::ScalarType dtype);
MPI_Op op_of(ReduceOp op);

// MPI counts are int: the element count, or InvalidArgument naming `what`.
int count_of(int64_t elements, const char* what);

}  // namespace dist::collective::mpi
