// interleave(fn, {cycle_length, block_length, num_parallel_calls}): tf.data's interleave.
//
// The cycle has cycle_length places, read in turn, block_length elements at a time. A place
// is filled when its turn comes: with the iterator of the dataset fn makes from the next input
// element. A finished iterator leaves its place empty and ends the turn; the place is refilled
// at its next turn, until the input is exhausted. This is tf.data's order. The order depends on
// nothing but the data, so it is the same with and without read-ahead threads (num_parallel_calls >
// 1 prefetches the first num_parallel_calls places' datasets on threads of their own).
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

using DatasetFn = std::function<Dataset(const Element&)>;

class InterleaveIterator : public IteratorNode {
 public:
  InterleaveIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const DatasetFn> fn,
                     const InterleaveOptions& options, int64_t epoch)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        options_(options),
        epoch_(epoch),
        cycle_(static_cast<size_t>(options.cycle_length)) {}

  std::optional<Element> next() override {
    while (!input_done_ || open_ > 0) {
      auto& current = cycle_[place_];
      if (current) {
        if (auto element = current->next()) {
          if (++taken_in_block_ == options_.block_length) advance();
          return element;
        }
        current.reset();  // finished: its place is refilled when the turn comes back
        --open_;
        advance();
      } else if (!fill_place(place_)) {
        advance();
      }
    }
    return std::nullopt;
  }

 private:
  // Puts the next input element's dataset in `place`; false when the input is exhausted.
  bool fill_place(size_t place) {
    if (input_done_) return false;
    auto element = input_->next();
    if (!element) {
      input_done_ = true;
      return false;
    }
    NodePtr node = (*fn_)(*element).node();
    if (static_cast<int64_t>(place) < options_.num_parallel_calls &&
        options_.num_parallel_calls > 1)
      node = make_prefetch_node(std::move(node), std::max<int64_t>(2, options_.block_length));
    cycle_[place] = node->make_iterator(epoch_);
    ++open_;
    taken_in_block_ = 0;
    return true;
  }
  void advance() {
    place_ = (place_ + 1) % cycle_.size();
    taken_in_block_ = 0;
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const DatasetFn> fn_;
  InterleaveOptions options_;
  int64_t epoch_;
  std::vector<std::unique_ptr<IteratorNode>> cycle_;
  size_t place_ = 0;
  int64_t taken_in_block_ = 0;
  int64_t open_ = 0;  // places holding an iterator
  bool input_done_ = false;
};

class InterleaveNode : public Stage<InterleaveNode> {
 public:
  InterleaveNode(NodePtr input, std::shared_ptr<const DatasetFn> fn, InterleaveOptions options)
      : Stage(std::move(input)), fn_(std::move(fn)), options_(options) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<InterleaveIterator>(input_->make_iterator(epoch), fn_, options_, epoch);
  }
  // The datasets are made while iterating: their sizes are not known in advance.
  int64_t cardinality() const override {
    return input_->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
  std::string call() const override {
    return call_text("interleave", "cycle_length=" + std::to_string(options_.cycle_length),
                     "block_length=" + std::to_string(options_.block_length));
  }

 private:
  std::shared_ptr<const DatasetFn> fn_;
  InterleaveOptions options_;
};

}  // namespace

NodePtr make_interleave_node(NodePtr input, DatasetFn fn, const InterleaveOptions& options) {
  return std::make_shared<InterleaveNode>(
      std::move(input), std::make_shared<const DatasetFn>(std::move(fn)), options);
}

}  // namespace dist::data::detail
