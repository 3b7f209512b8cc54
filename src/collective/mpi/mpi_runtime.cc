#include "collective/mpi/mpi_runtime.h"

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "dist/core/error.h"

namespace dist::collective::mpi {
namespace {

std::atomic<bool> failed{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !failed.load()) MPI_Finalize();
}

// Open MPI's mpirun, Slurm's srun with PMIx, MPICH's Hydra: each leaves one of these.
bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

void initialize() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    DIST_CHECK_ARG(started_by_mpi_launcher(),
                   "the MPI collective backend needs its worker processes started by an MPI "
                   "launcher (mpirun -np N dist-train ...): this process was not (no "
                   "OMPI_COMM_WORLD_SIZE or PMIX_RANK in its environment)");
    // Open MPI's nonblocking all-reduce (libnbc) picks a binomial tree, reduce to rank 0 then
    // broadcast, for fewer than 4 processes or in-place buffers: twice the time of a ring on
    // a 2-host link (docs/hosts-scaling.md). Ring, unless the user chose (mpirun --mca sets
    // this variable, which then wins).
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  }
  DIST_CHECK_ARG(provided >= MPI_THREAD_MULTIPLE,
                 "the MPI collective backend needs MPI_THREAD_MULTIPLE (replica threads issue "
                 "collectives concurrently), but this MPI library provides thread level ",
                 provided);
}

}  // namespace

void initialize_once() {
  static std::once_flag once;
  std::call_once(once, initialize);  // an exception leaves it to be tried again
}

void mark_failed() { failed = true; }

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("MPI ") + call + " failed: " + std::string(text, length));
}

MPI_Datatype reducible_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kLong:
      return MPI_INT64_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kByte:
      return MPI_UINT8_T;
    default:
      break;
  }
  throw InvalidArgument(std::string("the MPI collective backend cannot reduce ") +
                        c10::toString(dtype) + " tensors");
}

MPI_Op op_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMean:
      break;
  }
  DIST_INTERNAL_ASSERT(false, "a transport gets SUM, MIN or MAX");
}

int count_of(int64_t elements, const char* what) {
  DIST_CHECK_ARG(elements <= INT_MAX, "the MPI collective backend moves at most ", INT_MAX,
                 " elements per ", what, " (MPI counts are int), not ", elements,
                 ": use smaller gradient packs (bytes_per_pack)");
  return static_cast<int>(elements);
}

}  // namespace dist::collective::mpi
