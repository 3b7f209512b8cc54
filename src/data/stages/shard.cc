// shard(num_shards, index): every num_shards-th element from index on, skipping the others
// without computing them where the input can jump.
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// Element k of shard `index` is the input's element index + k * num_shards.
class ShardIterator : public IteratorNode {
 public:
  ShardIterator(std::unique_ptr<IteratorNode> input, int64_t num_shards, int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), next_wanted_(index) {}
  std::optional<Element> next() override {
    if (!reach(next_wanted_)) return std::nullopt;
    auto element = input_->next();
    if (!element) return std::nullopt;
    ++position_;
    next_wanted_ += num_shards_;
    return element;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n && reach(next_wanted_) && input_->skip(1) == 1) {
      ++position_;
      next_wanted_ += num_shards_;
      ++skipped;
    }
    return skipped;
  }

 private:
  // Skips the input to element `target`; false if it ends before.
  bool reach(int64_t target) {
    if (target > position_) position_ += input_->skip(target - position_);
    return position_ == target;
  }

  std::unique_ptr<IteratorNode> input_;
  int64_t num_shards_;
  int64_t next_wanted_;
  int64_t position_ = 0;  // input elements consumed
};

class ShardNode : public Stage<ShardNode> {
 public:
  ShardNode(NodePtr input, int64_t num_shards, int64_t index)
      : Stage(std::move(input)), num_shards_(num_shards), index_(index) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<ShardIterator>(input_->make_iterator(epoch), num_shards_, index_);
  }
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (c < 0) return c;
    return c > index_ ? (c - index_ + num_shards_ - 1) / num_shards_ : 0;
  }
  std::string call() const override { return call_text("shard", num_shards_, index_); }

 private:
  int64_t num_shards_;
  int64_t index_;
};

}  // namespace

NodePtr make_shard_node(NodePtr input, int64_t num_shards, int64_t index) {
  return std::make_shared<ShardNode>(std::move(input), num_shards, index);
}

}  // namespace dist::data::detail
