// Sources of elements: slices of in-memory tensors, and zips of other datasets.
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

class ZipIterator : public IteratorNode {
 public:
  explicit ZipIterator(std::vector<std::unique_ptr<IteratorNode>> inputs)
      : inputs_(std::move(inputs)) {}

  std::optional<Element> next() override {
    parts_.clear();
    Element out;
    bool named = true;
    std::vector<const void*> names_in;  // which name lists the parts carry
    for (auto& input : inputs_) {
      auto element = input->next();
      if (!element) return std::nullopt;
      out.insert(out.end(), element->begin(), element->end());
      named = named && element->has_names();
      names_in.push_back(element->shared_names().get());
      parts_.push_back(std::move(*element));
    }
    if (named) out.set_names(joined_names(names_in));
    return out;
  }

  int64_t skip(int64_t n) override {
    int64_t skipped = n;
    for (auto& input : inputs_) skipped = std::min(skipped, input->skip(n));
    return skipped;
  }

 private:
  // The parts' names joined, made once for each combination of name lists met (a pipeline's
  // elements share theirs, so this is once per iterator).
  const Element::Names& joined_names(const std::vector<const void*>& names_in) {
    if (names_in != joined_from_) {
      std::vector<std::string> all;
      for (const Element& part : parts_)
        all.insert(all.end(), part.names().begin(), part.names().end());
      joined_ = Element::make_names(std::move(all));
      joined_from_ = names_in;
    }
    return joined_;
  }

  std::vector<std::unique_ptr<IteratorNode>> inputs_;
  std::vector<Element> parts_;
  std::vector<const void*> joined_from_;
  Element::Names joined_;
};

class ZipNode : public DatasetNode {
 public:
  explicit ZipNode(std::vector<NodePtr> inputs) : inputs_(std::move(inputs)) {
    DIST_CHECK_ARG(!inputs_.empty(), "Dataset::zip needs at least one dataset");
  }
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    std::vector<std::unique_ptr<IteratorNode>> its;
    for (const auto& input : inputs_) its.push_back(input->make_iterator(epoch));
    return std::make_unique<ZipIterator>(std::move(its));
  }
  int64_t cardinality() const override {
    int64_t result = kInfiniteCardinality;
    for (const auto& input : inputs_) {
      int64_t c = input->cardinality();
      if (c == kUnknownCardinality) return kUnknownCardinality;
      if (c == kInfiniteCardinality) continue;
      result = result == kInfiniteCardinality ? c : std::min(result, c);
    }
    return result;
  }
  std::string describe() const override {
    std::string s = "zip(";
    for (size_t i = 0; i < inputs_.size(); ++i) s += (i ? ", " : "") + inputs_[i]->describe();
    return s + ")";
  }
  std::vector<NodePtr> inputs() const override { return inputs_; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    return std::make_shared<ZipNode>(std::move(inputs));
  }

 private:
  std::vector<NodePtr> inputs_;
};

}  // namespace

NodePtr make_tensor_slices_node(Element tensors) {
  return std::make_shared<TensorSlicesNode>(std::move(tensors));
}

NodePtr make_zip_node(std::vector<NodePtr> inputs) {
  return std::make_shared<ZipNode>(std::move(inputs));
}

}  // namespace dist::data::detail
