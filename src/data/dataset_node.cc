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

NodePtr DatasetNode::with_inputs(std::vector<NodePtr> inputs) const {
  DIST_INTERNAL_ASSERT(false, describe(), " has no inputs to replace (given ", inputs.size(), ")");
  return nullptr;
}

}  // namespace dist::data::detail
