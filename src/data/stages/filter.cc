// filter(predicate): the elements the predicate keeps. skip(n) evaluates it, as next() would.
#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

using Predicate = std::function<bool(const Element&)>;

class FilterIterator : public IteratorNode {
 public:
  FilterIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const Predicate> keep)
      : input_(std::move(input)), keep_(std::move(keep)) {}
  std::optional<Element> next() override {
    while (auto element = input_->next())
      if ((*keep_)(*element)) return element;
    return std::nullopt;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const Predicate> keep_;
};

class FilterNode : public Stage<FilterNode> {
 public:
  FilterNode(NodePtr input, std::shared_ptr<const Predicate> keep)
      : Stage(std::move(input)), keep_(std::move(keep)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<FilterIterator>(input_->make_iterator(epoch), keep_);
  }
  int64_t cardinality() const override {
    return input_->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
  std::string call() const override { return "filter()"; }

 private:
  std::shared_ptr<const Predicate> keep_;
};

}  // namespace

NodePtr make_filter_node(NodePtr input, Predicate predicate) {
  return std::make_shared<FilterNode>(std::move(input),
                                      std::make_shared<const Predicate>(std::move(predicate)));
}

}  // namespace dist::data::detail
