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
#include <random>

#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

class ShuffleIterator : public IteratorNode {
 public:
  ShuffleIterator(std::unique_ptr<IteratorNode> input, int64_t buffer_size, uint64_t seed)
      : input_(std::move(input)), buffer_size_(buffer_size), rng_(seed) {}

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
    size_t slot = pick(buffer_.size());
    Element out = std::move(buffer_[slot]);
    if (auto element = input_done_ ? std::nullopt : input_->next()) {
      buffer_[slot] = std::move(*element);
    } else {
      input_done_ = true;
      buffer_[slot] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return out;
  }

 private:
  size_t pick(size_t n) {
    // Lemire's multiply-shift: maps 64 random bits to [0, n) without division.
    return static_cast<size_t>((static_cast<unsigned __int128>(rng_()) * n) >> 64);
  }

  std::unique_ptr<IteratorNode> input_;
  int64_t buffer_size_;
  std::mt19937_64 rng_;
  std::vector<Element> buffer_;
  bool input_done_ = false;
};

class ShuffleNode : public DatasetNode {
 public:
  ShuffleNode(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    uint64_t stream = splitmix64(seed_ ^ splitmix64(reshuffle_ ? static_cast<uint64_t>(epoch) : 0));
    return std::make_unique<ShuffleIterator>(input_->make_iterator(epoch), buffer_size_, stream);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string describe() const override {
    return input_->describe() + ".shuffle(" + std::to_string(buffer_size_) + ")";
  }

 private:
  NodePtr input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

}  // namespace

NodePtr make_shuffle_node(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle) {
  return std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed, reshuffle);
}

}  // namespace dist::data::detail
