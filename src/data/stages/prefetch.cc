// prefetch(k): a producer thread runs the input pipeline up to k elements ahead.
//
// The thread starts on the first next(), so skip() before that (restoring a position) still
// uses the input's fast skip. An exception in the producer is handed to the consumer at the
// point in the sequence where it happened. Destroying the iterator stops and joins the thread
// (a pipeline thread: pipeline_thread.h).
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include "data/dataset_node.h"
#include "data/stages/pipeline_thread.h"

namespace dist::data::detail {
namespace {

class PrefetchIterator : public IteratorNode {
 public:
  PrefetchIterator(std::unique_ptr<IteratorNode> input, int64_t capacity)
      : input_(std::move(input)), capacity_(static_cast<size_t>(capacity)) {}

  ~PrefetchIterator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    if (producer_.joinable()) producer_.join();
  }

  std::optional<Element> next() override {
    if (!producer_.joinable()) producer_ = PipelineThread([this] { produce(); });
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return !queue_.empty() || done_; });
    if (queue_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return std::nullopt;
    }
    Element element = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    changed_.notify_all();
    return element;
  }

  int64_t skip(int64_t n) override {
    if (!producer_.joinable()) return input_->skip(n);
    return IteratorNode::skip(n);
  }

 private:
  void produce() {
    try {
      while (true) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          changed_.wait(lock, [this] { return stop_ || queue_.size() < capacity_; });
          if (stop_) break;
        }
        auto element = input_->next();
        std::lock_guard<std::mutex> lock(mu_);
        if (!element) break;
        queue_.push_back(std::move(*element));
        changed_.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    changed_.notify_all();
  }

  std::unique_ptr<IteratorNode> input_;
  size_t capacity_;
  PipelineThread producer_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Element> queue_;
  std::exception_ptr error_;
  bool done_ = false;
  bool stop_ = false;
};

// setting_: the buffer's capacity.
class PrefetchNode : public IteratingStage<PrefetchNode, PrefetchIterator, int64_t> {
 public:
  using IteratingStage::IteratingStage;
  std::string call() const override { return call_text("prefetch", setting_); }
  bool hands_on_elements() const override { return true; }
};

}  // namespace

NodePtr make_prefetch_node(NodePtr input, int64_t buffer_size) {
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace dist::data::detail
