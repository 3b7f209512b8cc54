#include "collective/gloo/gloo_transport.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "collective/store/store_client.h"
#include "collective/transport_guards.h"
#include "core/allowed_cores.h"
#include "core/stop_request.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using C10dWork = c10::intrusive_ptr<c10d::Work>;

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMean:
      break;
  }
  DIST_INTERNAL_ASSERT(false, "a transport gets SUM, MIN or MAX");
}

// How long a wait polls before it blocks. c10d's Gloo hands every operation to a thread of its
// own and wakes the waiting thread through a condition variable; where waking an idle CPU is
// slow (virtual machines: a 40-value all-reduce between two processes took 740 us, against 8 us
// for Open MPI, whose waits poll), those wakeups decided a small model's step. Polling keeps the
// waiting CPU awake for the operation's own threads too (measured, 2 hosts at 1 Gbit/s, tutorial
// CNN: 15% more images/s). Past this, the operation is long anyway and the wait blocks.
constexpr auto kPollBeforeBlocking = std::chrono::milliseconds(20);

// All-reduces of at least this many bytes (gradient packs of large models) go through a group
// of their own with one thread, so they cross the wire one at a time in the order they were
// issued: the first pack lands at the link's full rate instead of sharing it with the next, and
// the strategy steps that pack's parameters while the next one crosses (the step by packs,
// optimizer_step_plan.h). Everything else keeps a group of two threads, so that a small
// collective issued after a pack (the loss, the next agreement) does not wait for it: with one
// group of one thread for everything, the tutorial CNN lost 15-20% (docs/hosts-scaling.md). The
// choice is by size alone, so it is the same on every process (the agreement before each
// collective checks that the sizes match; with CommunicationOptions::check_collectives off,
// workers whose sizes differ wait in different groups until the collective timeout).
constexpr int64_t kBulkBytes = int64_t{1} << 20;

// c10d's Gloo sends and receives report isCompleted() false until they are waited for:
// polling them only cost 20 ms a wait, so their waits block at once.
constexpr auto kNoPolling = std::chrono::milliseconds(0);

// One operation's c10d works (a broadcast of several tensors is one per tensor), polled for
// `poll_for` before a wait blocks.
class GlooWork : public Work {
 public:
  GlooWork(std::vector<C10dWork> works, std::chrono::milliseconds poll_for)
      : works_(std::move(works)), poll_for_(poll_for) {}

  void wait(std::chrono::milliseconds deadline) override {
    const auto poll_until = std::chrono::steady_clock::now() +
                            (deadline.count() >= 0 ? std::min(deadline, poll_for_) : poll_for_);
    while (!is_completed() && std::chrono::steady_clock::now() < poll_until)
      std::this_thread::yield();
    for (auto& work : works_) {
      if (deadline.count() >= 0)
        work->wait(deadline);
      else
        work->wait();
    }
  }
  bool is_completed() override {
    for (auto& work : works_)
      if (!work->isCompleted()) return false;
    return true;
  }

 private:
  std::vector<C10dWork> works_;
  std::chrono::milliseconds poll_for_;
};

WorkHandle wrap(std::vector<C10dWork> works, std::chrono::milliseconds poll_for) {
  return std::make_shared<GlooWork>(std::move(works), poll_for);
}

class GlooTransport : public Transport {
 public:
  GlooTransport(const ProcessGroupSpec& spec, const c10::intrusive_ptr<c10d::Store>& store,
                std::chrono::milliseconds poll_for)
      : group_(make_group(spec, store, "gloo", 2)),
        bulk_(make_group(spec, store, "gloo-bulk", 1)),
        poll_for_(poll_for) {}

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    c10d::AllreduceCoalescedOptions options;
    options.reduceOp = to_c10d(op);
    int64_t bytes = 0;
    for (const auto& t : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
    const bool bulk = bytes >= kBulkBytes;
    if (bulk) bulk_used_ = true;
    auto& group = bulk ? bulk_ : group_;
    return wrap({tensors.size() == 1 ? group->allreduce(tensors, options)
                                     : group->allreduce_coalesced(tensors, options)},
                poll_for_);
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    std::vector<C10dWork> works;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      works.push_back(group_->broadcast(one, options));
    }
    return wrap(std::move(works), poll_for_);
  }

  WorkHandle all_gather(const at::Tensor& input, std::vector<at::Tensor>* outputs) override {
    std::vector<std::vector<at::Tensor>> into{*outputs};  // the same storage
    std::vector<at::Tensor> inputs{input};
    return wrap({group_->allgather(into, inputs)}, poll_for_);
  }

  // After every operation issued before it, of both groups (the bulk group's once it was used:
  // every process issues the same operations, so all of them agree on that).
  WorkHandle barrier() override {
    if (!bulk_used_) return wrap({group_->barrier()}, poll_for_);
    return wrap({bulk_->barrier(), group_->barrier()}, poll_for_);
  }

  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    std::vector<at::Tensor> one{tensor};
    return wrap({group_->send(one, to, tag)}, kNoPolling);
  }

  WorkHandle recv(at::Tensor& tensor, int from, int tag) override {
    std::vector<at::Tensor> one{tensor};
    return wrap({group_->recv(one, from, tag)}, kNoPolling);
  }

  void close() override {
    group_.reset();
    bulk_.reset();
  }

 private:
  using Group = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

  static Group make_group(const ProcessGroupSpec& spec,
                          const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix,
                          int threads) {
    const Member& self = spec.members[static_cast<size_t>(spec.rank)];
    auto options = c10d::ProcessGroupGloo::Options::create(spec.collective_timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(self.address.host));
    options->threads = threads;
    return c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(prefix, store), spec.rank,
        static_cast<int>(spec.members.size()), options);
  }

  Group group_;  // two threads: everything but large all-reduces
  Group bulk_;   // one thread: all-reduces of kBulkBytes and more, one at a time
  std::atomic<bool> bulk_used_{false};
  std::chrono::milliseconds poll_for_;  // poll_before_blocking()
};

// The transport being made on a thread of its own, and what came of it.
struct Connecting {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  std::unique_ptr<Transport> transport;
  std::exception_ptr error;
};

}  // namespace

std::chrono::milliseconds gloo_poll_before_blocking(const ProcessGroupSpec& spec, int cores) {
  if (const char* text = std::getenv("DIST_COLLECTIVE_POLL_MS"); text && *text) {
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value < 0 || value > 60000)
      throw InvalidArgument(std::string("DIST_COLLECTIVE_POLL_MS is '") + text +
                            "': give the milliseconds a collective's wait polls before it "
                            "blocks, a whole number from 0 to 60000");
    return std::chrono::milliseconds(value);
  }
  const std::string& host = spec.members[static_cast<size_t>(spec.rank)].address.host;
  const auto on_host = std::count_if(spec.members.begin(), spec.members.end(),
                                     [&](const Member& m) { return m.address.host == host; });
  return on_host <= cores ? kPollBeforeBlocking : kNoPolling;
}

std::unique_ptr<Transport> make_gloo_transport(const ProcessGroupSpec& spec,
                                               Rendezvous& rendezvous) {
  ignore_sigpipe_unless_handled();
  // Gloo's errors carry their source path ("[./gloo/transport/tcp/pair.cc:598] ...").
  exit_on_uncaught_error_of("Gloo", "gloo/");
  // Gloo's full mesh waits without a deadline for a peer that published its address and then
  // died (seen: a member blocked in tcp::Pair::connect for minutes with a 60 s timeout, keeping
  // the job's store alive with its heartbeat). So the mesh connects on a thread of its own, which
  // owns copies of all it touches, and this thread watches: when a member is lost (its process
  // ended, its heartbeat stopped) or a stop signal is pending, it leaves that thread blocked
  // where it is and throws, naming the member.
  const int allowed = detail::allowed_cores();
  const int cores = allowed > 0 ? allowed : static_cast<int>(std::thread::hardware_concurrency());
  const auto poll_for = gloo_poll_before_blocking(spec, cores);
  auto connecting = std::make_shared<Connecting>();
  std::thread([connecting, spec, poll_for, store = rendezvous.store()] {
    std::unique_ptr<Transport> transport;
    std::exception_ptr error;
    try {
      transport = std::make_unique<GlooTransport>(spec, store, poll_for);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(connecting->mu);
    connecting->transport = std::move(transport);
    connecting->error = error;
    connecting->done = true;
    connecting->done_cv.notify_all();
  }).detach();
  const std::string what = "connecting the Gloo process group";
  const std::function<void()> check_members = rendezvous.lost_member_check(what);
  std::unique_lock<std::mutex> lock(connecting->mu);
  while (!connecting->done_cv.wait_for(lock, std::chrono::milliseconds(250),
                                       [&] { return connecting->done; })) {
    lock.unlock();
    detail::throw_if_stop_requested(what.c_str());
    check_members();
    lock.lock();
  }
  if (connecting->error) std::rethrow_exception(connecting->error);
  return std::move(connecting->transport);
}

}  // namespace dist::collective
