#include "data/stages/pipeline_thread.h"

#include <pthread.h>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "core/intra_op_parallel.h"

namespace dist::data::detail {

namespace {

struct Task {
  std::function<void()> body;
  int intra_op_threads = 1;
  std::promise<void> done;
};

// The threads, leaked on purpose: an idle one waits on `ready_` until the process ends, and
// must find the pool whole whatever static objects the exit has destroyed by then.
class PipelinePool {
 public:
  static PipelinePool& get() {
    static const bool made = [] {
      current().store(new PipelinePool);
      // A child of fork() has none of the parent's threads: it starts with an empty pool.
      pthread_atfork(nullptr, nullptr, [] { current().store(new PipelinePool); });
      return true;
    }();
    (void)made;
    return *current().load();
  }

  void run(Task task) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    if (idle_ >= tasks_.size()) {
      ready_.notify_one();
    } else {
      std::thread([this] { serve(); }).detach();
    }
  }

 private:
  static std::atomic<PipelinePool*>& current() {
    static std::atomic<PipelinePool*> pool{nullptr};
    return pool;
  }

  static size_t kept_idle() { return std::thread::hardware_concurrency() + 2; }

  void serve() {
    // ATen's first parallel operation on this thread would re-initialize its count; run that
    // initialization now, once, so the counts set below stay.
    at::internal::lazy_init_num_threads();
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (tasks_.empty()) {
        if (idle_ >= kept_idle()) return;
        ++idle_;
        ready_.wait(lock, [this] { return !tasks_.empty(); });
        --idle_;
      }
      Task task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      dist::detail::set_intra_op_threads_of_this_thread(task.intra_op_threads);
      {
        // A new thread's autograd modes (grad and forward grad on, inference mode off: what
        // InferenceMode(false) sets), whatever an earlier task on this thread left set.
        c10::InferenceMode new_threads_modes(false);
        task.body();
      }
      auto done = std::move(task.done);
      task = Task{};  // the body's captures go before the thread waits for more
      // Told under the pool's lock, which this thread keeps until it waits for the next task:
      // a task started right after join() finds it idle (PipelineThreadTest counts on it).
      lock.lock();
      done.set_value();
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;
  size_t idle_ = 0;
};

}  // namespace

PipelineThread::PipelineThread(std::function<void()> task) {
  Task pending{std::move(task), at::get_num_threads(), {}};
  done_ = pending.done.get_future();
  PipelinePool::get().run(std::move(pending));
}

PipelineThread& PipelineThread::operator=(PipelineThread&& other) noexcept {
  if (this != &other) {
    if (joinable()) join();
    done_ = std::move(other.done_);
  }
  return *this;
}

PipelineThread::~PipelineThread() {
  if (joinable()) join();
}

void PipelineThread::join() {
  done_.wait();
  done_ = {};
}

}  // namespace dist::data::detail
