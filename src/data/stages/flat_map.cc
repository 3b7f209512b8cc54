// flat_map(fn): the elements of the dataset fn makes of each input element, in turn.
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

using FlatMapFn = std::function<Dataset(const Element&)>;

class FlatMapIterator : public IteratorNode {
 public:
  FlatMapIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const FlatMapFn> fn,
                  int64_t epoch)
      : input_(std::move(input)), fn_(std::move(fn)), epoch_(epoch) {}
  std::optional<Element> next() override {
    while (open_next_if_needed())
      if (auto element = inner_->next())
        return element;
      else
        inner_.reset();
    return std::nullopt;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n && open_next_if_needed()) {
      const int64_t want = n - skipped;
      const int64_t got = inner_->skip(want);
      skipped += got;
      if (got < want) inner_.reset();
    }
    return skipped;
  }

 private:
  // Makes inner_ the next input element's dataset's iterator if there is none; false at the end.
  bool open_next_if_needed() {
    if (inner_) return true;
    auto element = input_->next();
    if (!element) return false;
    inner_node_ = (*fn_)(*element).node();  // kept while its iterator runs
    inner_ = inner_node_->make_iterator(epoch_);
    return true;
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const FlatMapFn> fn_;
  int64_t epoch_;
  NodePtr inner_node_;
  std::unique_ptr<IteratorNode> inner_;
};

class FlatMapNode : public Stage<FlatMapNode> {
 public:
  FlatMapNode(NodePtr input, std::shared_ptr<const FlatMapFn> fn)
      : Stage(std::move(input)), fn_(std::move(fn)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<FlatMapIterator>(input_->make_iterator(epoch), fn_, epoch);
  }
  int64_t cardinality() const override {
    return input_->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
  std::string call() const override { return "flat_map()"; }

 private:
  std::shared_ptr<const FlatMapFn> fn_;
};

}  // namespace

NodePtr make_flat_map_node(NodePtr input, FlatMapFn fn) {
  return std::make_shared<FlatMapNode>(std::move(input),
                                       std::make_shared<const FlatMapFn>(std::move(fn)));
}

}  // namespace dist::data::detail
