// Pipeline threads (src/data/stages/pipeline_thread.h): a stage's task runs and is joined like a
// std::thread's, a later task runs on a thread an earlier one finished with (so ATen's
// per-thread initialization, which re-creates LibTorch's pthreadpool, runs once a thread), with
// the intra-op count of the thread that started it, and a child of fork() gets threads of its own.
#include "data/stages/pipeline_thread.h"

#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/intra_op_parallel.h"

namespace dist::data::detail {
namespace {

thread_local int tasks_run_here = 0;

TEST(PipelineThreadTest, JoinWaitsForTheTask) {
  std::atomic<bool> finished{false};
  PipelineThread thread([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    finished = true;
  });
  EXPECT_TRUE(thread.joinable());
  thread.join();
  EXPECT_TRUE(finished);
  EXPECT_FALSE(thread.joinable());
}

TEST(PipelineThreadTest, ALaterTaskRunsOnAThreadAnEarlierOneFinishedWith) {
  // As a prefetch stage's producer does each epoch: start, run, join, start again. The pool
  // keeps at most the cores + 2 threads idle and wakes any of them, so within one more epochs
  // than that some thread runs a second task; a std::thread per epoch would see 0 every time.
  const int epochs = static_cast<int>(std::thread::hardware_concurrency()) + 4;
  int most_seen = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    int seen = -1;
    PipelineThread([&] { seen = tasks_run_here++; }).join();
    most_seen = std::max(most_seen, seen);
  }
  EXPECT_GT(most_seen, 0) << "each of " << epochs << " epochs ran on a new thread";
}

TEST(PipelineThreadTest, TasksRunTogetherWhenStartedTogether) {
  // A parallel map's workers wait for each other's elements: none may queue behind another.
  std::atomic<int> arrived{0};
  std::vector<PipelineThread> workers;
  for (int t = 0; t < 6; ++t)
    workers.emplace_back([&] {
      ++arrived;
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (arrived < 6 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(arrived, 6);
}

TEST(PipelineThreadTest, ATaskStartsWithTheGradModeOfANewThread) {
  // A task that turns gradients off and leaves them off (a map function without a guard) must
  // not turn them off for the next task its thread runs.
  const int epochs = static_cast<int>(std::thread::hardware_concurrency()) + 4;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    bool enabled = false;
    PipelineThread([&] {
      enabled = at::GradMode::is_enabled();
      at::GradMode::set_enabled(false);
    }).join();
    EXPECT_TRUE(enabled) << "epoch " << epoch;
  }
}

// The intra-op count a task sees when started from a thread that has `threads`.
int count_seen_from_a_thread_with(int threads) {
  int seen = 0;
  std::thread starter([&] {
    at::internal::lazy_init_num_threads();
    dist::detail::set_intra_op_threads_of_this_thread(threads);
    PipelineThread([&] { seen = at::get_num_threads(); }).join();
  });
  starter.join();
  return seen;
}

TEST(PipelineThreadTest, ATaskHasTheIntraOpThreadsOfTheThreadThatStartedIt) {
  // The same pipeline threads serve both: each task gets its starter's count, not its thread's
  // previous one.
  EXPECT_EQ(count_seen_from_a_thread_with(3), 3);
  EXPECT_EQ(count_seen_from_a_thread_with(1), 1);
  EXPECT_EQ(count_seen_from_a_thread_with(3), 3);
}

TEST(PipelineThreadTest, AChildOfForkRunsItsTasksOnThreadsOfItsOwn) {
  // Idle pipeline threads in this process, which a child of fork() does not have.
  PipelineThread([] {}).join();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a task handed to a parent's thread would never run: the child dies instead
    bool ran = false;
    PipelineThread([&] { ran = true; }).join();
    _exit(ran ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child's task never ran (signal " << WTERMSIG(status)
                                 << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace dist::data::detail
