// Collectives on a thread of their own (collective_thread.h).
#include "collective/collective_thread.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "collective/forwarding_communicator.h"

namespace dist::collective {
namespace {

// A collective queued for the thread: done once the thread issued it and its work completed.
class QueuedWork : public Work {
 public:
  void wait(std::chrono::milliseconds /*deadline*/) override {
    // The queued collectives ahead and this one are each bounded by the communicator's timeout.
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void finish(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
    done_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class CollectiveThread : public ForwardingCommunicator {
 public:
  explicit CollectiveThread(Communicator& inner)
      : ForwardingCommunicator(inner), thread_([this] { run(); }) {}
  ~CollectiveThread() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      queued_cv_.notify_all();
    }
    thread_.join();  // after the queue drained: its tensors belong to callers still waiting
  }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    return queue([this, tensors, op]() mutable { return inner_.all_reduce(tensors, op); });
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    return queue([this, tensors, root]() mutable { return inner_.broadcast(tensors, root); });
  }
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override {
    return queue([this, input, output] { return inner_.all_gather(input, output); });
  }
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override {
    // A handle on the same storage: the caller's tensor object may go before the ring runs.
    return queue([this, input, output]() mutable { return inner_.all_gather_into(input, output); });
  }
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    return queue(
        [this, input, output, op]() mutable { return inner_.reduce_scatter(input, output, op); });
  }
  WorkHandle barrier() override {
    return queue([this] { return inner_.barrier(); });
  }
  std::shared_ptr<void> share_memory(int64_t bytes) override {
    std::shared_ptr<void> shared;
    queue([&] {
      shared = inner_.share_memory(bytes);
      return completed_work();
    })->wait();
    return shared;
  }

 private:
  WorkHandle queue(std::function<WorkHandle()> collective) {
    auto work = std::make_shared<QueuedWork>();
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(collective), work);
    queued_cv_.notify_all();
    return work;
  }

  void run() {
    for (;;) {
      std::pair<std::function<WorkHandle()>, std::shared_ptr<QueuedWork>> next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        queued_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      if (failure_) {  // the communicator is unusable after a failure: say so at once
        next.second->finish(failure_);
        continue;
      }
      try {
        next.first()->wait();
        next.second->finish(nullptr);
      } catch (...) {
        failure_ = std::current_exception();
        next.second->finish(failure_);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable queued_cv_;
  std::deque<std::pair<std::function<WorkHandle()>, std::shared_ptr<QueuedWork>>> queue_;
  bool stopping_ = false;
  std::exception_ptr failure_;  // the thread's own
  std::thread thread_;          // last: it starts with everything above in place
};

}  // namespace

std::unique_ptr<Communicator> on_collective_thread(Communicator& inner) {
  return std::make_unique<CollectiveThread>(inner);
}

}  // namespace dist::collective
