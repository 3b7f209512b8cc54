// from_tensor_slices(): the rows of in-memory tensors as elements.
#include <ATen/ATen.h>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

class TensorSlicesIterator : public IteratorNode {
 public:
  explicit TensorSlicesIterator(const Element* tensors, int64_t size)
      : tensors_(tensors), size_(size) {}

  std::optional<Element> next() override {
    if (index_ >= size_) return std::nullopt;
    Element element;
    element.reserve(tensors_->size());
    for (const auto& t : *tensors_) element.push_back(t.select(0, index_));
    element.set_names(tensors_->shared_names());
    ++index_;
    return element;
  }

  int64_t skip(int64_t n) override {
    int64_t skipped = std::min(n, size_ - index_);
    index_ += skipped;
    return skipped;
  }

 private:
  const Element* tensors_;  // owned by the node, which outlives iterators
  int64_t size_;
  int64_t index_ = 0;
};

class TensorSlicesNode : public DatasetNode, public std::enable_shared_from_this<TensorSlicesNode> {
 public:
  explicit TensorSlicesNode(Element tensors) : tensors_(std::move(tensors)) {
    DIST_CHECK_ARG(!tensors_.empty(), "from_tensor_slices needs at least one tensor");
    for (size_t i = 0; i < tensors_.size(); ++i) {
      DIST_CHECK_ARG(tensors_[i].defined() && tensors_[i].dim() >= 1, "from_tensor_slices: tensor ",
                     i, " must have at least one dimension to slice along");
      DIST_CHECK_ARG(tensors_[i].size(0) == tensors_[0].size(0), "from_tensor_slices: tensor ", i,
                     " has ", tensors_[i].size(0), " rows but tensor 0 has ", tensors_[0].size(0),
                     "; all tensors need the same size in dimension 0");
    }
  }

  std::unique_ptr<IteratorNode> make_iterator(int64_t) const override {
    // The iterator keeps the node alive through a shared_ptr held by the wrapper below.
    return std::make_unique<Owning>(shared_from_this(), &tensors_, cardinality());
  }
  int64_t cardinality() const override { return tensors_[0].size(0); }
  std::string describe() const override {
    return "from_tensor_slices(" + std::to_string(cardinality()) + ")";
  }

 private:
  struct Owning : TensorSlicesIterator {
    Owning(std::shared_ptr<const TensorSlicesNode> keep, const Element* t, int64_t n)
        : TensorSlicesIterator(t, n), keep_(std::move(keep)) {}
    std::shared_ptr<const TensorSlicesNode> keep_;
  };
  Element tensors_;
};

}  // namespace

NodePtr make_tensor_slices_node(Element tensors) {
  return std::make_shared<TensorSlicesNode>(std::move(tensors));
}

}  // namespace dist::data::detail
