// What every stage inherits: a one-input stage's description and copy over other inputs.
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
std::string UnaryNode::describe() const {
  const std::string own = call();
  return own.empty() ? input_->describe() : input_->describe() + "." + own;
}

NodePtr UnaryNode::with_inputs(std::vector<NodePtr> inputs) const {
  DIST_INTERNAL_ASSERT(inputs.size() == 1, describe(), " has one input, given ", inputs.size());
  return over(std::move(inputs[0]));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

std::vector<Element> Batching::next(IteratorNode& input) const {
  std::vector<Element> elements;
  elements.reserve(static_cast<size_t>(size));
  while (static_cast<int64_t>(elements.size()) < size) {
    auto element = input.next();
    if (!element) break;
    elements.push_back(std::move(*element));
  }
  if (drop_remainder && static_cast<int64_t>(elements.size()) < size) elements.clear();
  return elements;
}

int64_t Batching::skip(IteratorNode& input, int64_t n) const {
  const int64_t inner = input.skip(n * size);
  return inner / size + (inner % size != 0 && !drop_remainder ? 1 : 0);
}

NodePtr DatasetNode::with_inputs(std::vector<NodePtr> inputs) const {
  DIST_INTERNAL_ASSERT(false, describe(), " has no inputs to replace (given ", inputs.size(), ")");
  return nullptr;
}

}  // namespace dist::data::detail
