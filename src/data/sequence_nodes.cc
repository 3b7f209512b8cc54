// Stages that change how many elements there are: range, filter, flat_map, concatenate and
// unbatch. Each restores a position exactly: skip(n) passes the same elements next() would
// have given, jumping where the count is known (range, and whole inputs of concatenate) and
// evaluating what decides the count otherwise (the predicate, the inner datasets, the rows).
#include <ATen/ATen.h>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// The number of values start, start + step, ... before stop (in 128 bits: stop - start may
// not fit in 64).
int64_t range_count(int64_t start, int64_t stop, int64_t step) {
  const __int128 span = static_cast<__int128>(stop) - start;
  if ((step > 0 && span <= 0) || (step < 0 && span >= 0)) return 0;
  const __int128 toward_zero = step > 0 ? step - 1 : step + 1;
  return static_cast<int64_t>((span + toward_zero) / step);
}

class RangeIterator : public IteratorNode {
 public:
  RangeIterator(int64_t start, int64_t step, int64_t count)
      : start_(start), step_(step), count_(count) {}
  std::optional<Element> next() override {
    if (index_ >= count_) return std::nullopt;
    return Element{at::scalar_tensor(start_ + step_ * index_++, at::kLong)};
  }
  int64_t skip(int64_t n) override {
    const int64_t skipped = std::min(n, count_ - index_);
    index_ += skipped;
    return skipped;
  }

 private:
  int64_t start_;
  int64_t step_;
  int64_t count_;
  int64_t index_ = 0;
};

class RangeNode : public DatasetNode {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step) : start_(start), stop_(stop), step_(step) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t) const override {
    return std::make_unique<RangeIterator>(start_, step_, cardinality());
  }
  int64_t cardinality() const override { return range_count(start_, stop_, step_); }
  std::string describe() const override {
    return "range(" + std::to_string(start_) + ", " + std::to_string(stop_) + ", " +
           std::to_string(step_) + ")";
  }

 private:
  int64_t start_;
  int64_t stop_;
  int64_t step_;
};

using Predicate = std::function<bool(const Element&)>;

class FilterIterator : public IteratorNode {
 public:
  FilterIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const Predicate> keep)
      : input_(std::move(input)), keep_(std::move(keep)) {}
  std::optional<Element> next() override {
    while (auto element = input_->next())
      if ((*keep_)(*element)) return element;
    return std::nullopt;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const Predicate> keep_;
};

class FilterNode : public Stage<FilterNode> {
 public:
  FilterNode(NodePtr input, std::shared_ptr<const Predicate> keep)
      : Stage(std::move(input)), keep_(std::move(keep)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<FilterIterator>(input_->make_iterator(epoch), keep_);
  }
  int64_t cardinality() const override {
    return input_->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
  std::string call() const override { return "filter()"; }

 private:
  std::shared_ptr<const Predicate> keep_;
};

using FlatMapFn = std::function<Dataset(const Element&)>;

class FlatMapIterator : public IteratorNode {
 public:
  FlatMapIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const FlatMapFn> fn,
                  int64_t epoch)
      : input_(std::move(input)), fn_(std::move(fn)), epoch_(epoch) {}
  std::optional<Element> next() override {
    while (open_next_if_needed())
      if (auto element = inner_->next())
        return element;
      else
        inner_.reset();
    return std::nullopt;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n && open_next_if_needed()) {
      const int64_t want = n - skipped;
      const int64_t got = inner_->skip(want);
      skipped += got;
      if (got < want) inner_.reset();
    }
    return skipped;
  }

 private:
  // Makes inner_ the next input element's dataset's iterator if there is none; false at the end.
  bool open_next_if_needed() {
    if (inner_) return true;
    auto element = input_->next();
    if (!element) return false;
    inner_node_ = (*fn_)(*element).node();  // kept while its iterator runs
    inner_ = inner_node_->make_iterator(epoch_);
    return true;
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const FlatMapFn> fn_;
  int64_t epoch_;
  NodePtr inner_node_;
  std::unique_ptr<IteratorNode> inner_;
};

class FlatMapNode : public Stage<FlatMapNode> {
 public:
  FlatMapNode(NodePtr input, std::shared_ptr<const FlatMapFn> fn)
      : Stage(std::move(input)), fn_(std::move(fn)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<FlatMapIterator>(input_->make_iterator(epoch), fn_, epoch);
  }
  int64_t cardinality() const override {
    return input_->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
  std::string call() const override { return "flat_map()"; }

 private:
  std::shared_ptr<const FlatMapFn> fn_;
};

class ConcatenateIterator : public IteratorNode {
 public:
  ConcatenateIterator(std::unique_ptr<IteratorNode> first, NodePtr second, int64_t epoch)
      : current_(std::move(first)), second_(std::move(second)), epoch_(epoch) {}
  std::optional<Element> next() override {
    while (current_) {
      if (auto element = current_->next()) return element;
      move_on();
    }
    return std::nullopt;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (current_ && skipped < n) {
      const int64_t want = n - skipped;
      const int64_t got = current_->skip(want);
      skipped += got;
      if (got < want) move_on();
    }
    return skipped;
  }

 private:
  void move_on() {
    current_ = second_ ? second_->make_iterator(epoch_) : nullptr;
    second_ = nullptr;
  }

  std::unique_ptr<IteratorNode> current_;
  NodePtr second_;  // null once it is current_
  int64_t epoch_;
};

class ConcatenateNode : public DatasetNode {
 public:
  ConcatenateNode(NodePtr first, NodePtr second)
      : first_(std::move(first)), second_(std::move(second)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<ConcatenateIterator>(first_->make_iterator(epoch), second_, epoch);
  }
  int64_t cardinality() const override {
    const int64_t a = first_->cardinality();
    const int64_t b = second_->cardinality();
    if (a == kInfiniteCardinality || b == kInfiniteCardinality) return kInfiniteCardinality;
    if (a == kUnknownCardinality || b == kUnknownCardinality) return kUnknownCardinality;
    return a + b;
  }
  std::string describe() const override {
    return first_->describe() + ".concatenate(" + second_->describe() + ")";
  }
  std::vector<NodePtr> inputs() const override { return {first_, second_}; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    DIST_INTERNAL_ASSERT(inputs.size() == 2, "concatenate has two inputs, given ", inputs.size());
    return std::make_shared<ConcatenateNode>(std::move(inputs[0]), std::move(inputs[1]));
  }

 private:
  NodePtr first_;
  NodePtr second_;
};

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

NodePtr make_range_node(int64_t start, int64_t stop, int64_t step) {
  return std::make_shared<RangeNode>(start, stop, step);
}
NodePtr make_filter_node(NodePtr input, Predicate predicate) {
  return std::make_shared<FilterNode>(std::move(input),
                                      std::make_shared<const Predicate>(std::move(predicate)));
}
NodePtr make_flat_map_node(NodePtr input, FlatMapFn fn) {
  return std::make_shared<FlatMapNode>(std::move(input),
                                       std::make_shared<const FlatMapFn>(std::move(fn)));
}
NodePtr make_concatenate_node(NodePtr first, NodePtr second) {
  return std::make_shared<ConcatenateNode>(std::move(first), std::move(second));
}
NodePtr make_unbatch_node(NodePtr input) { return std::make_shared<UnbatchNode>(std::move(input)); }

}  // namespace dist::data::detail
