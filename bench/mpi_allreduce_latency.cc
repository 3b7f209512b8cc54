// Open MPI all-reduce latency between the ranks of one job: 200 in-place float sums of 8 and
// of 122,000 values (the tutorial CNN's gradients), blocking (MPI_Allreduce) and nonblocking
// polled to completion (MPI_Iallreduce + MPI_Test, as the MPI collective backend waits).
// Rank 0 prints microseconds per all-reduce. Built and run by bench/mpi_allreduce_latency.sh.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <vector>

namespace {

double microseconds_per_all_reduce(std::vector<float>& values, bool nonblocking) {
  const int count = static_cast<int>(values.size());
  const int repeats = 200;
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) {
    if (!nonblocking) {
      MPI_Allreduce(MPI_IN_PLACE, values.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      continue;
    }
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, values.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                   &request);
    for (int done = 0; !done;) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  }
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  return took.count() / repeats;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (size_t count : {size_t{8}, size_t{122000}}) {
    std::vector<float> values(count, 1.0f);
    for (bool nonblocking : {false, true}) {
      const double us = microseconds_per_all_reduce(values, nonblocking);
      if (rank == 0)
        std::printf("%zu floats, %s: %.1f us per all-reduce\n", count,
                    nonblocking ? "MPI_Iallreduce + MPI_Test" : "MPI_Allreduce", us);
    }
  }
  MPI_Finalize();
  return 0;
}
