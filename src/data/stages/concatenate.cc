// concatenate(other): the first dataset's elements, then the second's; skip() jumps whole
// inputs whose size is known.
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

class ConcatenateIterator : public IteratorNode {
 public:
  ConcatenateIterator(std::unique_ptr<IteratorNode> first, NodePtr second, int64_t epoch)
      : current_(std::move(first)), second_(std::move(second)), epoch_(epoch) {}
  std::optional<Element> next() override {
    while (current_) {
      if (auto element = current_->next()) return element;
      move_on();
    }
    return std::nullopt;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (current_ && skipped < n) {
      const int64_t want = n - skipped;
      const int64_t got = current_->skip(want);
      skipped += got;
      if (got < want) move_on();
    }
    return skipped;
  }

 private:
  void move_on() {
    current_ = second_ ? second_->make_iterator(epoch_) : nullptr;
    second_ = nullptr;
  }

  std::unique_ptr<IteratorNode> current_;
  NodePtr second_;  // null once it is current_
  int64_t epoch_;
};

class ConcatenateNode : public DatasetNode {
 public:
  ConcatenateNode(NodePtr first, NodePtr second)
      : first_(std::move(first)), second_(std::move(second)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<ConcatenateIterator>(first_->make_iterator(epoch), second_, epoch);
  }
  int64_t cardinality() const override {
    const int64_t a = first_->cardinality();
    const int64_t b = second_->cardinality();
    if (a == kInfiniteCardinality || b == kInfiniteCardinality) return kInfiniteCardinality;
    if (a == kUnknownCardinality || b == kUnknownCardinality) return kUnknownCardinality;
    return a + b;
  }
  std::string describe() const override {
    return first_->describe() + ".concatenate(" + second_->describe() + ")";
  }
  std::vector<NodePtr> inputs() const override { return {first_, second_}; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    DIST_INTERNAL_ASSERT(inputs.size() == 2, "concatenate has two inputs, given ", inputs.size());
    return std::make_shared<ConcatenateNode>(std::move(inputs[0]), std::move(inputs[1]));
  }

 private:
  NodePtr first_;
  NodePtr second_;
};

}  // namespace

NodePtr make_concatenate_node(NodePtr first, NodePtr second) {
  return std::make_shared<ConcatenateNode>(std::move(first), std::move(second));
}

}  // namespace dist::data::detail
