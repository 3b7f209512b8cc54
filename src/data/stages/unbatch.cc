// unbatch(): the rows of each batch as elements of their own.
#include <ATen/ATen.h>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

class UnbatchIterator : public IteratorNode {
 public:
  explicit UnbatchIterator(std::unique_ptr<IteratorNode> input) : input_(std::move(input)) {}
  std::optional<Element> next() override {
    if (!fill()) return std::nullopt;
    Element row;
    row.reserve(batch_.size());
    for (const auto& t : batch_) row.push_back(t.select(0, row_));
    row.set_names(batch_.shared_names());
    ++row_;
    return row;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n && fill()) {
      const int64_t step = std::min(n - skipped, rows_ - row_);
      row_ += step;
      skipped += step;
    }
    return skipped;
  }

 private:
  // Makes batch_ one with rows left; false at the end of the input.
  bool fill() {
    while (row_ >= rows_) {
      auto batch = input_->next();
      if (!batch) return false;
      check_rows(*batch);
      batch_ = std::move(*batch);
      row_ = 0;
    }
    return true;
  }
  void check_rows(const Element& batch) {
    DIST_CHECK_ARG(!batch.empty(), "unbatch: input element ", batches_, " has no components");
    for (size_t k = 0; k < batch.size(); ++k) {
      DIST_CHECK_ARG(batch[k].dim() >= 1, "unbatch: component ", k, " of input element ", batches_,
                     " is a scalar; unbatch splits every component along dimension 0");
      DIST_CHECK_ARG(batch[k].size(0) == batch[0].size(0), "unbatch: component ", k,
                     " of input element ", batches_, " has ", batch[k].size(0),
                     " rows but component 0 has ", batch[0].size(0), " (", batch.describe(),
                     "); every component needs the same size in dimension 0");
    }
    rows_ = batch[0].size(0);
    ++batches_;
  }

  std::unique_ptr<IteratorNode> input_;
  Element batch_;
  int64_t rows_ = 0;
  int64_t row_ = 0;
  int64_t batches_ = 0;  // input elements read, for errors
};

class UnbatchNode : public Stage<UnbatchNode> {
 public:
  explicit UnbatchNode(NodePtr input) : Stage(std::move(input)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<UnbatchIterator>(input_->make_iterator(epoch));
  }
  int64_t cardinality() const override {
    // Through stages that hand elements on (prefetch, with_options) to a batch, if any.
    NodePtr at = input_;
    while (at->hands_on_elements()) at = at->inputs().at(0);
    if (const auto* batch = dynamic_cast<const BatchingStage*>(at.get()))
      return batch->batched_rows();
    const int64_t c = input_->cardinality();
    return c == 0 || c == kInfiniteCardinality ? c : kUnknownCardinality;
  }
  std::string call() const override { return "unbatch()"; }
};

}  // namespace

NodePtr make_unbatch_node(NodePtr input) { return std::make_shared<UnbatchNode>(std::move(input)); }

}  // namespace dist::data::detail
