// Work split over ATen's intra-op threads from the library's own code.
//
// at::parallel_for is a template whose `#pragma omp parallel` is compiled into its caller: in a
// file compiled without -fopenmp (every other file of the library: the flag would change the
// precompiled header the tools and tests reuse) it runs every chunk on the calling thread.
// intra_op_parallel.cc alone is compiled with -fopenmp (CMakeLists.txt).
#pragma once

#include <cstdint>
#include <functional>

namespace dist::detail {

// at::parallel_for(begin, end, grain, body) on the calling thread's intra-op threads (its
// at::get_num_threads()); ATen's operations inside `body` run on the thread that runs them.
// Rethrows the first exception a chunk threw, after every chunk has ended.
void intra_op_parallel_for(int64_t begin, int64_t end, int64_t grain,
                           const std::function<void(int64_t, int64_t)>& body);

// Gives the calling thread `threads` intra-op threads, as at::set_num_threads(threads) would for
// it, but without at::set_num_threads' process-wide effects: the count a new thread starts with
// stays, and LibTorch's pthreadpool is not re-created. A thread's first ATen operation resets its
// count (at::init_num_threads): call at::internal::lazy_init_num_threads() before this.
void set_intra_op_threads_of_this_thread(int threads);

}  // namespace dist::detail
