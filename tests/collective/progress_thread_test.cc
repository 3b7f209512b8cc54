// ProgressThread (the MPI transport's): moves operations in flight while nobody waits for them,
// forgets them once done or dropped, and stops promptly. Built with the MPI backend; a suite of
// its own ctest test per case (it is in neither suite list, which a build without MPI would
// then fail to find).
#include "collective/backends_built.h"

#if DIST_HAVE_MPI

#include "collective/mpi/progress_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace dist::collective {
namespace {

using namespace std::chrono_literals;

// Done after `needed` advances; counts every advance.
class CountedOperation : public Progressing {
 public:
  explicit CountedOperation(int needed) : needed_(needed) {}
  bool advance() override { return ++advances_ >= needed_; }
  int advances() const { return advances_; }

 private:
  const int needed_;
  std::atomic<int> advances_{0};
};

// Waits up to 5 s for `done`.
template <typename Done>
bool eventually(Done done) {
  for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(1ms))
    if (done()) return true;
  return done();
}

TEST(ProgressThreadTest, AdvancesAnOperationUntilItIsDoneThenForgetsIt) {
  ProgressThread progress;
  auto operation = std::make_shared<CountedOperation>(5);
  progress.watch(operation);
  ASSERT_TRUE(eventually([&] { return operation->advances() >= 5; }));
  // Done: no more advances, however long it stays alive.
  std::this_thread::sleep_for(20 * ProgressThread::kInterval);
  EXPECT_EQ(operation->advances(), 5);
}

TEST(ProgressThreadTest, ADroppedOperationIsHeldOnlyWeakly) {
  ProgressThread progress;
  auto operation = std::make_shared<CountedOperation>(1000000);
  std::weak_ptr<CountedOperation> watched = operation;
  progress.watch(operation);
  ASSERT_TRUE(eventually([&] { return operation->advances() >= 2; }));
  operation.reset();  // the waiter gave up on it: the thread holds it only weakly
  EXPECT_TRUE(eventually([&] { return watched.expired(); }));
}

TEST(ProgressThreadTest, StopsPromptlyWithOperationsInFlightAndIgnoresLaterOnes) {
  auto progress = std::make_unique<ProgressThread>();
  auto operation = std::make_shared<CountedOperation>(1000000);
  progress->watch(operation);
  ASSERT_TRUE(eventually([&] { return operation->advances() >= 2; }));
  const auto start = std::chrono::steady_clock::now();
  progress->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  const int advances = operation->advances();
  auto late = std::make_shared<CountedOperation>(1);
  progress->watch(late);  // after stop: never advanced
  std::this_thread::sleep_for(20 * ProgressThread::kInterval);
  EXPECT_EQ(operation->advances(), advances);
  EXPECT_EQ(late->advances(), 0);
  progress.reset();  // stop again from the destructor: a no-op
}

}  // namespace
}  // namespace dist::collective

#endif  // DIST_HAVE_MPI
