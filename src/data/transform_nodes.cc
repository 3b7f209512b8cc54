// Element-wise and counting stages: map, batch, take, skip, repeat.
#include <ATen/ATen.h>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

using MapFn = std::function<Element(Element)>;
using ContextMapFn = std::function<Element(Element, const ElementContext&)>;

// Both map() and map_with_context() run here; the index counts the input's elements, skipped
// ones included, so a restored iterator hands every element the context it had before.
class MapIterator : public IteratorNode {
 public:
  MapIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const ContextMapFn> fn,
              int64_t epoch)
      : input_(std::move(input)), fn_(std::move(fn)), epoch_(epoch) {}
  std::optional<Element> next() override {
    auto element = input_->next();
    if (!element) return std::nullopt;
    return (*fn_)(std::move(*element), ElementContext{epoch_, index_++});
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = input_->skip(n);
    index_ += skipped;
    return skipped;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const ContextMapFn> fn_;
  int64_t epoch_;
  int64_t index_ = 0;
};

class MapNode : public Stage<MapNode> {
 public:
  MapNode(NodePtr input, ContextMapFn fn, std::string name)
      : MapNode(std::move(input), std::make_shared<const ContextMapFn>(std::move(fn)),
                std::move(name)) {}
  MapNode(NodePtr input, std::shared_ptr<const ContextMapFn> fn, std::string name)
      : Stage(std::move(input)), fn_(std::move(fn)), name_(std::move(name)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<MapIterator>(input_->make_iterator(epoch), fn_, epoch);
  }
  std::string call() const override { return name_ + "()"; }

 private:
  std::shared_ptr<const ContextMapFn> fn_;
  std::string name_;
};

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

class TakeIterator : public IteratorNode {
 public:
  TakeIterator(std::unique_ptr<IteratorNode> input, int64_t count)
      : input_(std::move(input)), remaining_(count) {}
  std::optional<Element> next() override {
    if (remaining_ == 0) return std::nullopt;
    auto element = input_->next();
    if (element && remaining_ > 0) --remaining_;
    return element;
  }
  int64_t skip(int64_t n) override {
    int64_t want = remaining_ < 0 ? n : std::min(n, remaining_);
    int64_t skipped = input_->skip(want);
    if (remaining_ > 0) remaining_ -= skipped;
    return skipped;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  int64_t remaining_;  // -1: unlimited
};

class TakeNode : public Stage<TakeNode> {
 public:
  TakeNode(NodePtr input, int64_t count) : Stage(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<TakeIterator>(input_->make_iterator(epoch), count_);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (count_ < 0) return c;
    if (c == kInfiniteCardinality) return count_;
    if (c == kUnknownCardinality) return c;
    return std::min(c, count_);
  }
  std::string call() const override { return call_text("take", count_); }

 private:
  int64_t count_;
};

class SkipNode : public Stage<SkipNode> {
 public:
  SkipNode(NodePtr input, int64_t count) : Stage(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    auto it = input_->make_iterator(epoch);
    it->skip(count_);
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    return c < 0 ? c : std::max<int64_t>(0, c - count_);
  }
  std::string call() const override { return call_text("skip", count_); }

 private:
  int64_t count_;
};

class RepeatIterator : public IteratorNode {
 public:
  RepeatIterator(NodePtr input, int64_t count, int64_t epoch)
      : input_(std::move(input)), count_(count), epoch_(epoch) {}
  std::optional<Element> next() override {
    while (count_ < 0 || repetition_ < count_) {
      if (!current_) {
        current_ = input_->make_iterator(inner_epoch());
        produced_in_repetition_ = 0;
      }
      if (auto element = current_->next()) {
        ++produced_in_repetition_;
        return element;
      }
      current_.reset();
      ++repetition_;
      // An empty input would make repeat(-1) spin forever; tf.data ends instead.
      if (produced_in_repetition_ == 0) return std::nullopt;
    }
    return std::nullopt;
  }

 private:
  // Repetition r of outer epoch e iterates the input at epoch e*count + r, so that repeating
  // a shuffled dataset n times gives the same orders as n separate epochs.
  int64_t inner_epoch() const {
    int64_t per_epoch = count_ < 0 ? (int64_t{1} << 32) : count_;
    return epoch_ * per_epoch + repetition_;
  }

  NodePtr input_;
  int64_t count_;
  int64_t epoch_;
  int64_t repetition_ = 0;
  int64_t produced_in_repetition_ = 0;
  std::unique_ptr<IteratorNode> current_;
};

class RepeatNode : public Stage<RepeatNode> {
 public:
  RepeatNode(NodePtr input, int64_t count) : Stage(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<RepeatIterator>(input_, count_, epoch);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (count_ == 0 || c == 0) return 0;
    if (c == kUnknownCardinality) return c;
    if (count_ < 0 || c == kInfiniteCardinality) return kInfiniteCardinality;
    return c * count_;
  }
  std::string call() const override { return call_text("repeat", count_); }

 private:
  int64_t count_;
};

}  // namespace

NodePtr make_map_node(NodePtr input, MapFn fn) {
  ContextMapFn ignoring_context = [fn = std::move(fn)](Element e, const ElementContext&) {
    return fn(std::move(e));
  };
  return std::make_shared<MapNode>(std::move(input), std::move(ignoring_context), "map");
}
NodePtr make_map_with_context_node(NodePtr input, ContextMapFn fn) {
  return std::make_shared<MapNode>(std::move(input), std::move(fn), "map_with_context");
}
NodePtr make_batch_node(NodePtr input, int64_t batch_size, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}
NodePtr make_take_node(NodePtr input, int64_t count) {
  return std::make_shared<TakeNode>(std::move(input), count);
}
NodePtr make_skip_node(NodePtr input, int64_t count) {
  return std::make_shared<SkipNode>(std::move(input), count);
}
NodePtr make_repeat_node(NodePtr input, int64_t count) {
  return std::make_shared<RepeatNode>(std::move(input), count);
}

}  // namespace dist::data::detail
