// Compiled with -fopenmp, apart from the unity units and the precompiled header
// (CMakeLists.txt): ATen's parallel_for then opens its OpenMP team here.
#include "core/intra_op_parallel.h"

#include <ATen/Parallel.h>
#include <omp.h>

namespace dist::detail {

void intra_op_parallel_for(int64_t begin, int64_t end, int64_t grain,
                           const std::function<void(int64_t, int64_t)>& body) {
  at::parallel_for(begin, end, grain, body);
}

void set_intra_op_threads_of_this_thread(int threads) {
  if (threads > 0 && omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

}  // namespace dist::detail
