// A thread for a stage's work (prefetch's producer, a parallel map's workers), taken from threads
// that earlier epochs' stages have finished with.
//
// Why not a new std::thread each epoch: the first ATen operation on a new thread initializes its
// intra-op thread count (at::init_num_threads -> at::set_num_threads), and that re-creates
// LibTorch's process-wide pthreadpool, whose new workers spin for ~20 ms before they sleep. A
// short one-device run (dist-train, cnn, 512 examples x 3 epochs) took 0.88 s of CPU with a new
// thread each epoch, 0.69 s with kept ones (docs/measurements.md).
//
// A task runs with the intra-op thread count of the thread that started it (the one iterating
// the dataset), set for the pipeline thread alone. Threads kept idle are few (the machine's
// cores and 2); the rest end with their task, as a std::thread would.
#pragma once

#include <functional>
#include <future>

namespace dist::data::detail {

class PipelineThread {
 public:
  PipelineThread() = default;
  // Runs `task` on a pipeline thread. An exception leaving `task` ends the process
  // (std::terminate), as it would on a std::thread: catch what the consumer must see.
  explicit PipelineThread(std::function<void()> task);
  PipelineThread(PipelineThread&&) noexcept = default;
  PipelineThread& operator=(PipelineThread&&) noexcept;
  ~PipelineThread();  // joins

  // True from the start until join().
  bool joinable() const { return done_.valid(); }
  // Waits until the task has returned; its thread may then run another stage's task.
  void join();

 private:
  std::future<void> done_;
};

}  // namespace dist::data::detail
