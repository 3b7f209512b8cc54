// batch(batch_size, drop_remainder): stacks each component of consecutive elements.
#include <ATen/ATen.h>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// Stacks component k of every element into one tensor with a new leading dimension.
Element stack_elements(const std::vector<Element>& elements) {
  const size_t arity = elements.front().size();
  Element batch;
  std::vector<at::Tensor> parts(elements.size());
  for (size_t k = 0; k < arity; ++k) {
    for (size_t i = 0; i < elements.size(); ++i) {
      DIST_CHECK_ARG(elements[i].size() == arity, "batch: element ", i, " has ", elements[i].size(),
                     " components but element 0 has ", arity);
      DIST_CHECK_ARG(elements[i][k].sizes() == elements[0][k].sizes(), "batch: component ", k,
                     " of element ", i, " has shape ", elements[i][k].sizes(),
                     " but element 0 has shape ", elements[0][k].sizes(),
                     "; map the elements to one shape before batching");
      parts[i] = elements[i][k];
    }
    batch.push_back(at::stack(parts));
  }
  batch.set_names(elements.front().shared_names());
  return batch;
}

class BatchIterator : public IteratorNode {
 public:
  BatchIterator(std::unique_ptr<IteratorNode> input, Batching batching)
      : input_(std::move(input)), batching_(batching) {}
  std::optional<Element> next() override {
    const std::vector<Element> elements = batching_.next(*input_);
    if (elements.empty()) return std::nullopt;
    return stack_elements(elements);
  }
  int64_t skip(int64_t n) override { return batching_.skip(*input_, n); }

 private:
  std::unique_ptr<IteratorNode> input_;
  Batching batching_;
};

class BatchNode : public IteratingStage<BatchNode, BatchIterator, Batching, BatchStage>,
                  public BatchingStage {
 public:
  using IteratingStage::IteratingStage;
  int64_t batch_size() const override { return setting_.size; }
  bool drop_remainder() const override { return setting_.drop_remainder; }
  int64_t batched_rows() const override { return setting_.rows(input_->cardinality()); }
  int64_t rows_per_batch() const override { return setting_.size; }
  NodePtr with_rows_per_batch(int64_t size) const override {
    return std::make_shared<BatchNode>(input_, Batching{size, setting_.drop_remainder});
  }
  int64_t cardinality() const override { return setting_.batches(input_->cardinality()); }
  std::string call() const override {
    return setting_.drop_remainder ? call_text("batch", setting_.size, "drop_remainder")
                                   : call_text("batch", setting_.size);
  }
};

}  // namespace

NodePtr make_batch_node(NodePtr input, int64_t batch_size, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), Batching{batch_size, drop_remainder});
}

}  // namespace dist::data::detail
