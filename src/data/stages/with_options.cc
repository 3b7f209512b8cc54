// with_options(): the options node, and the search for the options a pipeline carries.
#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

class OptionsNode : public Stage<OptionsNode> {
 public:
  OptionsNode(NodePtr input, const DatasetOptions& options)
      : Stage(std::move(input)), options_(options) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return input_->make_iterator(epoch);
  }
  std::string call() const override { return ""; }
  bool hands_on_elements() const override { return true; }
  const DatasetOptions& options() const { return options_; }

 private:
  DatasetOptions options_;
};

}  // namespace

NodePtr make_options_node(NodePtr input, const DatasetOptions& options) {
  return std::make_shared<OptionsNode>(std::move(input), options);
}

DatasetOptions options_of(const NodePtr& node) {
  DatasetOptions found;
  // Depth first from the output: the first setting met is the outermost.
  std::vector<NodePtr> pending{node};
  while (!pending.empty()) {
    NodePtr at = std::move(pending.back());
    pending.pop_back();
    if (const auto* options = dynamic_cast<const OptionsNode*>(at.get())) {
      if (!found.auto_shard_policy) found.auto_shard_policy = options->options().auto_shard_policy;
    }
    auto inputs = at->inputs();
    pending.insert(pending.end(), inputs.rbegin(), inputs.rend());
  }
  return found;
}

}  // namespace dist::data::detail
