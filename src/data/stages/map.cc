// map() and map_with_context() run one element at a time (num_parallel_calls 1; parallel_map.cc
// runs the others).
#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

using MapFn = std::function<Element(Element)>;
using ContextMapFn = std::function<Element(Element, const ElementContext&)>;

// Both map() and map_with_context() run here; the index counts the input's elements, skipped
// ones included, so a restored iterator hands every element the context it had before.
class MapIterator : public IteratorNode {
 public:
  MapIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const ContextMapFn> fn,
              int64_t epoch)
      : input_(std::move(input)), fn_(std::move(fn)), epoch_(epoch) {}
  std::optional<Element> next() override {
    auto element = input_->next();
    if (!element) return std::nullopt;
    return (*fn_)(std::move(*element), ElementContext{epoch_, index_++});
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = input_->skip(n);
    index_ += skipped;
    return skipped;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const ContextMapFn> fn_;
  int64_t epoch_;
  int64_t index_ = 0;
};

class MapNode : public Stage<MapNode> {
 public:
  MapNode(NodePtr input, ContextMapFn fn, std::string name)
      : MapNode(std::move(input), std::make_shared<const ContextMapFn>(std::move(fn)),
                std::move(name)) {}
  MapNode(NodePtr input, std::shared_ptr<const ContextMapFn> fn, std::string name)
      : Stage(std::move(input)), fn_(std::move(fn)), name_(std::move(name)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<MapIterator>(input_->make_iterator(epoch), fn_, epoch);
  }
  std::string call() const override { return name_ + "()"; }

 private:
  std::shared_ptr<const ContextMapFn> fn_;
  std::string name_;
};

}  // namespace

NodePtr make_map_node(NodePtr input, MapFn fn) {
  ContextMapFn ignoring_context = [fn = std::move(fn)](Element e, const ElementContext&) {
    return fn(std::move(e));
  };
  return std::make_shared<MapNode>(std::move(input), std::move(ignoring_context), "map");
}
NodePtr make_map_with_context_node(NodePtr input, ContextMapFn fn) {
  return std::make_shared<MapNode>(std::move(input), std::move(fn), "map_with_context");
}

}  // namespace dist::data::detail
