// detail::intra_op_parallel_for really spreads its chunks over ATen's intra-op threads: called
// from a file compiled without -fopenmp, at::parallel_for runs every chunk on the calling thread
// (src/core/intra_op_parallel.h), and the optimizer's per-thread shares (step_all) and Dropout's
// masks silently went serial.
#include "core/intra_op_parallel.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace dist {
namespace {

// at::set_num_threads for one test, the count before it restored after (the suite's cases
// share one process).
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int threads) : before_(at::get_num_threads()) {
    at::set_num_threads(threads);
  }
  ~IntraOpThreads() { at::set_num_threads(before_); }

 private:
  int before_;
};

TEST(IntraOpParallelTest, ChunksRunOnAsManyThreadsAsTheCallerHas) {
  IntraOpThreads two(2);
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::set<int64_t> seen;
  detail::intra_op_parallel_for(0, 2, 1, [&](int64_t begin, int64_t end) {
    // Long enough that one thread cannot take both chunks before the other starts.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    for (int64_t i = begin; i < end; ++i) seen.insert(i);
  });
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1}));
  EXPECT_EQ(threads.size(), 2u) << "both chunks ran on one thread: is intra_op_parallel.cc still "
                                   "compiled with -fopenmp?";
}

TEST(IntraOpParallelTest, OneThreadRunsEveryChunkOnTheCaller) {
  IntraOpThreads one(1);
  std::set<std::thread::id> threads;
  int64_t covered = 0;
  detail::intra_op_parallel_for(0, 100, 1, [&](int64_t begin, int64_t end) {
    threads.insert(std::this_thread::get_id());
    covered += end - begin;
  });
  EXPECT_EQ(covered, 100);
  EXPECT_EQ(threads, (std::set<std::thread::id>{std::this_thread::get_id()}));
}

TEST(IntraOpParallelTest, AChunksExceptionReachesTheCaller) {
  IntraOpThreads two(2);
  EXPECT_THROW(detail::intra_op_parallel_for(0, 2, 1,
                                             [](int64_t begin, int64_t) {
                                               if (begin == 1) throw std::runtime_error("chunk 1");
                                             }),
               std::runtime_error);
}

}  // namespace
}  // namespace dist
