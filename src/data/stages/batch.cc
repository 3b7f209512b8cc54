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
  BatchIterator(std::unique_ptr<IteratorNode> input, int64_t size, bool drop_remainder)
      : input_(std::move(input)), size_(size), drop_remainder_(drop_remainder) {}
  std::optional<Element> next() override {
    std::vector<Element> elements;
    elements.reserve(static_cast<size_t>(size_));
    while (static_cast<int64_t>(elements.size()) < size_) {
      auto element = input_->next();
      if (!element) break;
      elements.push_back(std::move(*element));
    }
    if (elements.empty()) return std::nullopt;
    if (drop_remainder_ && static_cast<int64_t>(elements.size()) < size_) return std::nullopt;
    return stack_elements(elements);
  }
  int64_t skip(int64_t n) override {
    int64_t inner = input_->skip(n * size_);
    int64_t full = inner / size_;
    bool partial = inner % size_ != 0 && !drop_remainder_;
    return full + (partial ? 1 : 0);
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  int64_t size_;
  bool drop_remainder_;
};

class BatchNode : public Stage<BatchNode, BatchStage>, public BatchingStage {
 public:
  BatchNode(NodePtr input, int64_t size, bool drop_remainder)
      : Stage(std::move(input)), size_(size), drop_remainder_(drop_remainder) {}
  int64_t batch_size() const override { return size_; }
  bool drop_remainder() const override { return drop_remainder_; }
  int64_t batched_rows() const override {
    return batched_rows_of(input_->cardinality(), size_, drop_remainder_);
  }
  int64_t rows_per_batch() const override { return size_; }
  NodePtr with_rows_per_batch(int64_t size) const override {
    return std::make_shared<BatchNode>(input_, size, drop_remainder_);
  }
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<BatchIterator>(input_->make_iterator(epoch), size_, drop_remainder_);
  }
  int64_t cardinality() const override {
    return batches_of(input_->cardinality(), size_, drop_remainder_);
  }
  std::string call() const override {
    return drop_remainder_ ? call_text("batch", size_, "drop_remainder")
                           : call_text("batch", size_);
  }

 private:
  int64_t size_;
  bool drop_remainder_;
};

}  // namespace

NodePtr make_batch_node(NodePtr input, int64_t batch_size, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}

}  // namespace dist::data::detail
