#include "collective/counting_communicator.h"

#include <atomic>

#include "core/timeline_recorder.h"

namespace dist::collective {
namespace {

using detail::TimelineClock;

// What the timeline says of one collective (dist/core/timeline.h).
struct CollectiveRecord {
  const char* kind;
  int64_t payload;
  int64_t sent;
  int peers;
  const char* algorithm;
};

// A collective's work that, while a timeline is recorded, records the collective (from its
// issue until a thread saw it complete) and each wait that blocked on it.
class RecordedWork : public Work {
 public:
  RecordedWork(WorkHandle inner, CollectiveRecord record, TimelineClock::time_point issued)
      : inner_(std::move(inner)), record_(record), issued_(issued) {}

  void wait(std::chrono::milliseconds deadline) override {
    if (recorded_.load(std::memory_order_acquire)) return inner_->wait(deadline);
    const auto started = TimelineClock::now();
    inner_->wait(deadline);
    const auto ended = TimelineClock::now();
    detail::record_span("wait", "collective", started, ended, {{"bytes", record_.payload}}, "of",
                        record_.kind);
    completed(ended);
  }
  bool is_completed() override {
    const bool done = inner_->is_completed();
    if (done) completed(TimelineClock::now());
    return done;
  }

 private:
  void completed(TimelineClock::time_point when) {
    if (recorded_.exchange(true)) return;
    detail::record_collective(
        record_.kind, issued_, when,
        {{"bytes", record_.payload}, {"bytes_sent", record_.sent}, {"peers", record_.peers}},
        record_.algorithm);
  }

  WorkHandle inner_;
  CollectiveRecord record_;
  TimelineClock::time_point issued_;
  std::atomic<bool> recorded_{false};
};

int64_t bytes_of(const at::Tensor& tensor) {
  return tensor.numel() * static_cast<int64_t>(tensor.element_size());
}

int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += bytes_of(t);
  return bytes;
}

class CountingCommunicator : public Communicator {
 public:
  CountingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<ByteCounters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string member_name(int rank) const override { return inner_->member_name(rank); }

  WorkHandle all_reduce(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    const int64_t bytes = bytes_of(tensors);
    return counted({"all_reduce", bytes, all_reduce_sends(bytes), peers(), in_memory()},
                   [&] { return inner_->all_reduce(tensors, op); });
  }
  WorkHandle all_reduce_to_process_leader(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    const int64_t bytes = bytes_of(tensors);
    return counted({"all_reduce", bytes, all_reduce_sends(bytes), peers(), in_memory()},
                   [&] { return inner_->all_reduce_to_process_leader(tensors, op); });
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    const int64_t bytes = bytes_of(tensors);
    return counted({"broadcast", bytes, rank() == root ? peers() * bytes : 0, peers(), in_memory()},
                   [&] { return inner_->broadcast(tensors, root); });
  }
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override {
    const int64_t bytes = bytes_of(input);
    return counted({"all_gather", bytes, peers() * bytes, peers(), backend()},
                   [&] { return inner_->all_gather(input, output); });
  }
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override {
    const int64_t bytes = bytes_of(input);
    return counted({"all_gather", bytes, peers() * bytes, peers(), backend()},
                   [&] { return inner_->all_gather_into(input, output); });
  }
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    const int64_t bytes = bytes_of(input);
    return counted({"reduce_scatter", bytes, peers() * bytes / size(), peers(), backend()},
                   [&] { return inner_->reduce_scatter(input, output, op); });
  }
  WorkHandle barrier() override { return inner_->barrier(); }
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    const int64_t bytes = bytes_of(tensor);
    return counted({"send", bytes, bytes, 1, backend()},
                   [&] { return inner_->send(tensor, to, tag); });
  }
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override {
    return inner_->recv(tensor, from, tag);
  }
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override {
    return inner_->exchange(key, value);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }
  std::shared_ptr<void> share_memory(int64_t bytes) override { return inner_->share_memory(bytes); }
  bool completes_in_call() const override { return inner_->completes_in_call(); }
  const char* backend_name() const override { return inner_->backend_name(); }

 private:
  int peers() const { return size() - 1; }
  int64_t all_reduce_sends(int64_t bytes) const { return 2 * peers() * bytes / size(); }
  const char* backend() const { return inner_->backend_name(); }
  // Where all-reduces and broadcasts go: shared memory for the members of one host.
  const char* in_memory() const { return completes_in_call() ? "shared memory" : backend(); }

  // Counts the collective `record` describes, issues it, and records it while a timeline is.
  template <class Issue>
  WorkHandle counted(const CollectiveRecord& record, const Issue& issue) {
    if (size() == 1) return issue();  // nothing leaves the process
    counters_->collectives.fetch_add(1, std::memory_order_relaxed);
    counters_->payload_bytes.fetch_add(record.payload, std::memory_order_relaxed);
    counters_->bytes_sent.fetch_add(record.sent, std::memory_order_relaxed);
    if (!timeline_recording()) return issue();
    const auto issued = TimelineClock::now();
    WorkHandle work = issue();
    // The call itself, on the issuing thread: all of the work where it completes in the call
    // (shared memory), the hand-over to the backend's threads otherwise.
    detail::record_span("issue", "collective", issued, TimelineClock::now(),
                        {{"bytes", record.payload}}, "of", record.kind);
    return std::make_shared<RecordedWork>(std::move(work), record, issued);
  }

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<ByteCounters> counters_;
};

}  // namespace

std::unique_ptr<Communicator> count_bytes(std::unique_ptr<Communicator> inner,
                                          std::shared_ptr<ByteCounters> counters) {
  return std::make_unique<CountingCommunicator>(std::move(inner), std::move(counters));
}

}  // namespace dist::collective
