// Collectives on a thread of their own (collective/collective_thread.h): a call returns before
// its collective runs, the collectives run in the order of the calls, and after one fails every
// later one fails with its error. The communicator underneath is a recording one whose gather
// waits for the test to let it go, so what runs when is the test's choice, not the clock's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "collective/collective_thread.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

class RecordingCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string member_name(int rank) const override { return "member " + std::to_string(rank); }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp) override {
    record("all_reduce");
    tensors[0].mul_(2);
    return completed_work();
  }
  WorkHandle broadcast(std::vector<at::Tensor>&, int) override { return record("broadcast"); }
  WorkHandle all_gather(const at::Tensor&, at::Tensor*) override { return record("all_gather"); }
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override {
    std::unique_lock<std::mutex> lock(mu_);
    gate_cv_.wait(lock, [this] { return open_; });
    calls_.push_back("all_gather_into");
    output.narrow(0, 0, input.numel()).copy_(input);
    return completed_work();
  }
  WorkHandle reduce_scatter(const at::Tensor&, at::Tensor&, ReduceOp) override {
    record("reduce_scatter");
    throw CollectiveError("member 1 was lost");
  }
  WorkHandle barrier() override { return record("barrier"); }
  WorkHandle send(const at::Tensor&, int, int) override { return record("send"); }
  WorkHandle recv(at::Tensor&, int, int) override { return record("recv"); }
  std::vector<std::string> exchange(const std::string&, const std::string&) override { return {}; }

  void open_gate() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    gate_cv_.notify_all();
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  WorkHandle record(const std::string& call) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(call);
    return completed_work();
  }
  std::mutex mu_;
  std::condition_variable gate_cv_;
  bool open_ = false;
  std::vector<std::string> calls_;
};

TEST(CollectiveThreadTest, ACallReturnsBeforeItsCollectiveRunsAndTheyRunInCallOrder) {
  RecordingCommunicator inner;
  auto threaded = on_collective_thread(inner);
  at::Tensor input = torch::full({3}, 7.0f), output = torch::zeros({6});
  WorkHandle gather = threaded->all_gather_into(input, output);
  std::vector<at::Tensor> reduced{torch::ones({2})};
  WorkHandle reduce = threaded->all_reduce(reduced, ReduceOp::kSum);
  // The gather waits for the gate, and the all-reduce behind it.
  EXPECT_FALSE(gather->is_completed());
  EXPECT_FALSE(reduce->is_completed());
  EXPECT_TRUE(inner.calls().empty());
  // Point to point is tagged, not ordered: it does not wait behind them.
  at::Tensor message = torch::ones({1});
  threaded->send(message, 1, 5)->wait();
  EXPECT_EQ(inner.calls(), std::vector<std::string>{"send"});
  inner.open_gate();
  reduce->wait();
  EXPECT_TRUE(gather->is_completed());
  EXPECT_EQ(inner.calls(), (std::vector<std::string>{"send", "all_gather_into", "all_reduce"}));
  EXPECT_TRUE(torch::equal(output.narrow(0, 0, 3), input));
  EXPECT_TRUE(torch::equal(reduced[0], torch::full({2}, 2.0f)));
}

TEST(CollectiveThreadTest, AfterACollectiveFailsEveryLaterOneFailsWithItsError) {
  RecordingCommunicator inner;
  inner.open_gate();
  auto threaded = on_collective_thread(inner);
  at::Tensor input = torch::ones({4}), output = torch::zeros({2});
  WorkHandle scatter = threaded->reduce_scatter(input, output, ReduceOp::kSum);
  std::vector<at::Tensor> reduced{torch::ones({2})};
  WorkHandle reduce = threaded->all_reduce(reduced, ReduceOp::kSum);
  EXPECT_THROW(scatter->wait(), CollectiveError);
  try {
    reduce->wait();
    FAIL() << "a collective ran after one failed";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("member 1 was lost"), std::string::npos) << e.what();
  }
  EXPECT_EQ(inner.calls(), std::vector<std::string>{"reduce_scatter"});
}

TEST(CollectiveThreadTest, ItsEndWaitsForTheQueuedCollectives) {
  RecordingCommunicator inner;
  std::vector<at::Tensor> reduced{torch::ones({2})};
  {
    auto threaded = on_collective_thread(inner);
    at::Tensor input = torch::ones({1}), output = torch::zeros({2});
    threaded->all_gather_into(input, output);
    threaded->all_reduce(reduced, ReduceOp::kSum);
    inner.open_gate();
  }  // ends here: both ran before it did
  EXPECT_EQ(inner.calls(), (std::vector<std::string>{"all_gather_into", "all_reduce"}));
  EXPECT_TRUE(torch::equal(reduced[0], torch::full({2}, 2.0f)));
}

}  // namespace
}  // namespace dist::collective
