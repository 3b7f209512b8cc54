// A stop signal ends the library's waits for other processes (core/stop_request.h): a
// PreemptionWatcher catches SIGTERM, watchers nest, and a store wait for a key nobody writes
// ends within a fraction of a second with StopRequested, while keys that are there are still
// read (a heartbeat goes on until the step ends).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "collective/store/store_client.h"
#include "collective/store/store_server.h"
#include "core/stop_request.h"
#include "dist/core/error.h"
#include "dist/train/preemption.h"

namespace dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(StopSignalTest, NestedWatchersShareACaughtSignalAndTheWaitsSeeItOnlyWhileWatched) {
  {
    PreemptionWatcher outer;
    EXPECT_NO_THROW(detail::throw_if_stop_requested("waiting"));
    {
      PreemptionWatcher inner;  // fit's BackupAndRestore inside dist-train's start-up watcher
      ::raise(SIGTERM);
      EXPECT_TRUE(inner.requested());
    }
    EXPECT_TRUE(outer.requested());  // the inner one's end neither lost nor restored anything
    EXPECT_EQ(detail::pending_stop_signal(), SIGTERM);
    try {
      detail::throw_if_stop_requested("waiting for every worker to join the rendezvous");
      FAIL() << "no StopRequested";
    } catch (const StopRequested& e) {
      EXPECT_STREQ(e.what(),
                   "stopped by SIGTERM while waiting for every worker to join the "
                   "rendezvous");
    }
  }
  EXPECT_EQ(detail::pending_stop_signal(), 0);  // nobody watches: waits go on
  EXPECT_NO_THROW(detail::throw_if_stop_requested("waiting"));
  PreemptionWatcher next;  // a new watcher starts with no signal
  EXPECT_FALSE(next.requested());
}

TEST(StopSignalTest, AStoreWaitEndsSoonAfterTheSignalButKeysThatAreThereAreRead) {
  collective::StoreServer server({"127.0.0.1", 0});
  collective::StoreClient client(server.address(), 60s, "");
  client.set("there", collective::to_bytes("1"));
  PreemptionWatcher watcher;
  std::thread signaller([] {
    std::this_thread::sleep_for(300ms);
    ::raise(SIGINT);
  });
  const auto start = Clock::now();
  EXPECT_THROW(client.wait({"never-written"}), StopRequested);
  signaller.join();
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 1s);
  EXPECT_EQ(client.get("there"), collective::to_bytes("1"));
  EXPECT_THROW(collective::StoreClient(server.address(), 5s, ""), StopRequested);
  // On the way out a member still says it leaves.
  EXPECT_TRUE(collective::say_left(server.address(), "", "", "worker:3", 2s));
  EXPECT_TRUE(server.check("left/worker:3"));
}

}  // namespace
}  // namespace dist
