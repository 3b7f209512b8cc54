#include "collective/counting_communicator.h"

namespace dist::collective {
namespace {

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
    count_all_reduce(bytes_of(tensors));
    return inner_->all_reduce(tensors, op);
  }
  WorkHandle all_reduce_to_process_leader(std::vector<at::Tensor>& tensors, ReduceOp op) override {
    count_all_reduce(bytes_of(tensors));
    return inner_->all_reduce_to_process_leader(tensors, op);
  }
  WorkHandle broadcast(std::vector<at::Tensor>& tensors, int root) override {
    const int64_t bytes = bytes_of(tensors);
    count(bytes, rank() == root ? (size() - 1) * bytes : 0);
    return inner_->broadcast(tensors, root);
  }
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override {
    count(bytes_of(input), (size() - 1) * bytes_of(input));
    return inner_->all_gather(input, output);
  }
  WorkHandle all_gather_into(const at::Tensor& input, at::Tensor& output) override {
    count(bytes_of(input), (size() - 1) * bytes_of(input));
    return inner_->all_gather_into(input, output);
  }
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    count(bytes_of(input), (size() - 1) * bytes_of(input) / size());
    return inner_->reduce_scatter(input, output, op);
  }
  WorkHandle barrier() override { return inner_->barrier(); }
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    count(bytes_of(tensor), bytes_of(tensor));
    return inner_->send(tensor, to, tag);
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

 private:
  void count_all_reduce(int64_t bytes) { count(bytes, 2 * (size() - 1) * bytes / size()); }
  void count(int64_t payload, int64_t sent) {
    if (size() == 1) return;  // nothing leaves the process
    counters_->collectives.fetch_add(1, std::memory_order_relaxed);
    counters_->payload_bytes.fetch_add(payload, std::memory_order_relaxed);
    counters_->bytes_sent.fetch_add(sent, std::memory_order_relaxed);
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
