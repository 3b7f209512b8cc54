// map(fn, {num_parallel_calls > 1}): fn runs on a pool of threads, several elements ahead.
//
// The iterating thread pulls input elements in order, numbers them (their ElementContext index,
// so a parallel map gives every element the context the sequential one gives) and hands them to
// the pool; up to 2 x threads are in flight. In deterministic order the consumer waits for the
// oldest; otherwise it takes whichever is ready first. An exception in fn reaches the consumer
// at that element's place. skip() drops the elements in flight and skips the rest in the input
// without calling fn, as the sequential map does. Told which elements will only be skipped (a
// worker's rows of a global batch, data/sharding/row_share.cc), it passes them without computing
// them.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "data/dataset_node.h"
#include "data/stages/pipeline_thread.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

using ContextMapFn = std::function<Element(Element, const ElementContext&)>;

// One element on its way through fn.
struct Slot {
  Element input;
  ElementContext context;
  bool computed = true;  // false: to be skipped, fn never called
  std::optional<Element> output;
  std::exception_ptr error;
  bool done = false;
};

class ParallelMapIterator : public IteratorNode {
 public:
  ParallelMapIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const ContextMapFn> fn,
                      int64_t epoch, int64_t threads, bool deterministic,
                      std::function<bool(int64_t)> computes)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        epoch_(epoch),
        threads_(static_cast<size_t>(threads)),
        deterministic_(deterministic),
        computes_(std::move(computes)) {}

  ~ParallelMapIterator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_ready_.notify_all();
    for (auto& worker : workers_) worker.join();
  }

  std::optional<Element> next() override {
    if (workers_.empty()) start_workers();
    fill();
    std::unique_lock<std::mutex> lock(mu_);
    if (in_flight_.empty()) return std::nullopt;
    auto ready = in_flight_.begin();
    slot_done_.wait(lock, [&] {
      if (deterministic_) return in_flight_.front()->done;
      for (ready = in_flight_.begin(); ready != in_flight_.end(); ++ready)
        if ((*ready)->done) return true;
      return false;
    });
    if (deterministic_) ready = in_flight_.begin();
    std::shared_ptr<Slot> slot = *ready;
    in_flight_.erase(ready);
    lock.unlock();
    DIST_INTERNAL_ASSERT(slot->computed, "element ", slot->context.index,
                         " was asked for, but the stage was told it would be skipped");
    if (slot->error) std::rethrow_exception(slot->error);
    return std::move(slot->output);
  }

  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    {
      // Elements in flight come first in the sequence; their results are no longer wanted
      // (a worker finishing one writes into a slot nobody reads).
      std::lock_guard<std::mutex> lock(mu_);
      while (skipped < n && !in_flight_.empty()) {
        auto waiting = std::find(queue_.begin(), queue_.end(), in_flight_.front());
        if (waiting != queue_.end()) queue_.erase(waiting);
        in_flight_.pop_front();
        ++skipped;
      }
    }
    if (skipped < n) {
      const int64_t more = input_->skip(n - skipped);
      index_ += more;
      skipped += more;
    }
    return skipped;
  }

 private:
  void start_workers() {
    for (size_t t = 0; t < threads_; ++t) workers_.emplace_back([this] { work(); });
  }

  // Pulls input elements until 2 x threads are in flight or the input ends.
  // Elements in flight at most: enough that the threads take work in runs (one wake-up per
  // run, not per element: for cheap functions the hand-over would cost more than the work).
  size_t window() const { return std::max<size_t>(4 * threads_, 32); }

  void fill() {
    bool queued = false;
    while (!input_done_) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (in_flight_.size() >= window()) break;
      }
      auto element = input_->next();  // on this thread: the input's iterator is not shared
      if (!element) {
        input_done_ = true;
        break;
      }
      auto slot = std::make_shared<Slot>();
      slot->context = ElementContext{epoch_, index_++};
      if (computes_ && !computes_(slot->context.index)) {
        slot->computed = false;
        slot->done = true;
        std::lock_guard<std::mutex> lock(mu_);
        in_flight_.push_back(std::move(slot));
        continue;
      }
      slot->input = std::move(*element);
      {
        std::lock_guard<std::mutex> lock(mu_);
        in_flight_.push_back(slot);
        queue_.push_back(std::move(slot));
      }
      queued = true;
      // The first elements start at once; the rest of the window is handed over in runs.
      if (in_flight_.size() <= threads_) work_ready_.notify_one();
    }
    if (queued) work_ready_.notify_all();
  }

  void work() {
    std::vector<std::shared_ptr<Slot>> run;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        // A run of consecutive elements, a fair share of what waits (at most 16), so the
        // oldest element is not left behind a long run and wake-ups stay few.
        const size_t take = std::clamp<size_t>(queue_.size() / threads_, 1, 16);
        run.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
      }
      for (auto& slot : run) {
        std::optional<Element> output;
        std::exception_ptr error;
        try {
          output = (*fn_)(std::move(slot->input), slot->context);
        } catch (...) {
          error = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          slot->output = std::move(output);
          slot->error = error;
          slot->done = true;
        }
        // The consumer waits for the oldest: tell it when that may be this one.
        slot_done_.notify_all();
      }
      run.clear();
    }
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const ContextMapFn> fn_;
  int64_t epoch_;
  size_t threads_;
  bool deterministic_;
  std::function<bool(int64_t)> computes_;  // empty: every element
  int64_t index_ = 0;
  bool input_done_ = false;

  std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable slot_done_;
  std::deque<std::shared_ptr<Slot>> in_flight_;  // in input order, until handed out
  std::deque<std::shared_ptr<Slot>> queue_;      // not yet taken by a worker
  std::vector<PipelineThread> workers_;
  bool stop_ = false;
};

class ParallelMapNode : public Stage<ParallelMapNode, ParallelMapStage> {
 public:
  ParallelMapNode(NodePtr input, std::shared_ptr<const ContextMapFn> fn, int64_t threads,
                  bool deterministic, std::function<bool(int64_t)> computes = {})
      : Stage(std::move(input)),
        fn_(std::move(fn)),
        threads_(threads),
        deterministic_(deterministic),
        computes_(std::move(computes)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<ParallelMapIterator>(input_->make_iterator(epoch), fn_, epoch, threads_,
                                                 deterministic_, computes_);
  }
  NodePtr computing_only(std::function<bool(int64_t)> computes) const override {
    // Out of order, a skipped element could be handed out: only the ordered map is told.
    if (!deterministic_) return nullptr;
    auto copy = std::make_shared<ParallelMapNode>(*this);
    copy->computes_ = std::move(computes);
    return copy;
  }
  std::string call() const override {
    const std::string threads = "num_parallel_calls=" + std::to_string(threads_);
    return deterministic_ ? call_text("map", threads)
                          : call_text("map", threads, "deterministic=false");
  }

 private:
  std::shared_ptr<const ContextMapFn> fn_;
  int64_t threads_;
  bool deterministic_;
  std::function<bool(int64_t)> computes_;
};

}  // namespace

NodePtr make_parallel_map_node(NodePtr input, ContextMapFn fn, const MapOptions& options) {
  int64_t threads = options.num_parallel_calls;
  if (threads == kAutotune)
    threads = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return std::make_shared<ParallelMapNode>(std::move(input),
                                           std::make_shared<const ContextMapFn>(std::move(fn)),
                                           threads, options.deterministic);
}

}  // namespace dist::data::detail
