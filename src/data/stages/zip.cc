// zip(datasets): one element of each input, joined.
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

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

NodePtr make_zip_node(std::vector<NodePtr> inputs) {
  return std::make_shared<ZipNode>(std::move(inputs));
}

}  // namespace dist::data::detail
