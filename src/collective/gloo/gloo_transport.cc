#include "collective/gloo/gloo_transport.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "collective/store/store_client.h"
#include "collective/transport_guards.h"
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

// One operation's c10d works (a broadcast of several tensors is one per tensor).
class GlooWork : public Work {
 public:
  explicit GlooWork(std::vector<C10dWork> works) : works_(std::move(works)) {}

  void wait(std::chrono::milliseconds deadline) override {
    const auto poll_until =
        std::chrono::steady_clock::now() +
        (deadline.count() >= 0 ? std::min(deadline, kPollBeforeBlocking) : kPollBeforeBlocking);
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
};

WorkHandle wrap(std::vector<C10dWork> works) {
  return std::make_shared<GlooWork>(std::move(works));
}

class GlooTransport : public Transport {
 public:
  GlooTransport(const ProcessGroupSpec& spec, const c10::intrusive_ptr<c10d::Store>& store) {
    const Member& self = spec.members[static_cast<size_t>(spec.rank)];
    auto options = c10d::ProcessGroupGloo::Options::create(spec.collective_timeout);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(self.address.host));
    options->threads = 2;
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", store), spec.rank,
        static_cast<int>(spec.members.size()), options);
  }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    c10d::AllreduceCoalescedOptions options;
    options.reduceOp = to_c10d(op);
    return wrap({tensors.size() == 1 ? group_->allreduce(tensors, options)
                                     : group_->allreduce_coalesced(tensors, options)});
  }

  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    std::vector<C10dWork> works;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      works.push_back(group_->broadcast(one, options));
    }
    return wrap(std::move(works));
  }

  WorkHandle all_gather(const at::Tensor& input, std::vector<at::Tensor>* outputs) override {
    std::vector<std::vector<at::Tensor>> into{*outputs};  // the same storage
    std::vector<at::Tensor> inputs{input};
    return wrap({group_->allgather(into, inputs)});
  }

  WorkHandle barrier() override { return wrap({group_->barrier()}); }

  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    std::vector<at::Tensor> one{tensor};
    return wrap({group_->send(one, to, tag)});
  }

  WorkHandle recv(at::Tensor& tensor, int from, int tag) override {
    std::vector<at::Tensor> one{tensor};
    return wrap({group_->recv(one, from, tag)});
  }

  void close() override { group_.reset(); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

std::unique_ptr<Transport> make_gloo_transport(const ProcessGroupSpec& spec,
                                               Rendezvous& rendezvous) {
  ignore_sigpipe_unless_handled();
  // Gloo's errors carry their source path ("[./gloo/transport/tcp/pair.cc:598] ...").
  exit_on_uncaught_error_of("Gloo", "gloo/");
  return std::make_unique<GlooTransport>(spec, rendezvous.store());
}

}  // namespace dist::collective
