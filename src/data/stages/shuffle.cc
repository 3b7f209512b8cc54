// shuffle(buffer_size, seed): tf.data's buffered shuffle.
//
// The buffer is filled with the first buffer_size elements; each output is a uniformly chosen
// buffer slot, which is then refilled with the next input element (or removed once the input
// is exhausted). With buffer_size >= the dataset size this is a uniform permutation.
//
// The random stream is std::mt19937_64, whose output the C++ standard fixes, seeded from
// (seed, epoch) by splitmix64; slot choice uses a multiply-shift, not std::uniform_int_
// distribution (whose output is implementation-defined). So an order depends on the seed and
// epoch only, on every platform and compiler.
#include "data/dataset_node.h"
#include "data/epoch_random.h"

namespace dist::data::detail {
namespace {

class ShuffleIterator : public IteratorNode {
 public:
  ShuffleIterator(std::unique_ptr<IteratorNode> input, int64_t buffer_size, std::mt19937_64 rng)
      : input_(std::move(input)), buffer_size_(buffer_size), rng_(rng) {}

  std::optional<Element> next() override {
    while (!input_done_ && static_cast<int64_t>(buffer_.size()) < buffer_size_) {
      auto element = input_->next();
      if (!element) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*element));
    }
    if (buffer_.empty()) return std::nullopt;
    // The refill is read before anything changes, so an input that throws (a damaged record,
    // skipped by ignore_errors above) leaves the buffer and the random stream as they were.
    auto refill = input_done_ ? std::nullopt : input_->next();
    size_t slot = pick(buffer_.size());
    Element out = std::move(buffer_[slot]);
    if (refill) {
      buffer_[slot] = std::move(*refill);
    } else {
      input_done_ = true;
      buffer_[slot] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return out;
  }

 private:
  size_t pick(size_t n) { return uniform_below(rng_, n); }

  std::unique_ptr<IteratorNode> input_;
  int64_t buffer_size_;
  std::mt19937_64 rng_;
  std::vector<Element> buffer_;
  bool input_done_ = false;
};

class ShuffleNode : public Stage<ShuffleNode> {
 public:
  ShuffleNode(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : Stage(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<ShuffleIterator>(
        input_->make_iterator(epoch), buffer_size_,
        epoch_stream(seed_, reshuffle_ ? static_cast<uint64_t>(epoch) : 0));
  }
  std::string call() const override { return call_text("shuffle", buffer_size_); }

 private:
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

}  // namespace

NodePtr make_shuffle_node(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle) {
  return std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed, reshuffle);
}

}  // namespace dist::data::detail
