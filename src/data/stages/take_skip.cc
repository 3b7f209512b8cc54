// take(count) and skip(count): the first count elements, or all after them.
#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

class TakeIterator : public IteratorNode {
 public:
  TakeIterator(std::unique_ptr<IteratorNode> input, int64_t count)
      : input_(std::move(input)), remaining_(count) {}
  std::optional<Element> next() override {
    if (remaining_ == 0) return std::nullopt;
    auto element = input_->next();
    if (element && remaining_ > 0) --remaining_;
    return element;
  }
  int64_t skip(int64_t n) override {
    int64_t want = remaining_ < 0 ? n : std::min(n, remaining_);
    int64_t skipped = input_->skip(want);
    if (remaining_ > 0) remaining_ -= skipped;
    return skipped;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  int64_t remaining_;  // -1: unlimited
};

// setting_: the count (-1: all).
class TakeNode : public IteratingStage<TakeNode, TakeIterator, int64_t> {
 public:
  using IteratingStage::IteratingStage;
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (setting_ < 0) return c;
    if (c == kInfiniteCardinality) return setting_;
    if (c == kUnknownCardinality) return c;
    return std::min(c, setting_);
  }
  std::string call() const override { return call_text("take", setting_); }
};

// setting_: the count.
class SkipNode : public SettingStage<SkipNode, int64_t> {
 public:
  using SettingStage::SettingStage;
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    auto it = input_->make_iterator(epoch);
    it->skip(setting_);
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    return c < 0 ? c : std::max<int64_t>(0, c - setting_);
  }
  std::string call() const override { return call_text("skip", setting_); }
};

}  // namespace

NodePtr make_take_node(NodePtr input, int64_t count) {
  return std::make_shared<TakeNode>(std::move(input), count);
}
NodePtr make_skip_node(NodePtr input, int64_t count) {
  return std::make_shared<SkipNode>(std::move(input), count);
}

}  // namespace dist::data::detail
