// Dataset: an input pipeline over elements that are tuples of tensors.
//
// Modeled on tf.data. A Dataset is an immutable, cheap-to-copy description of a pipeline;
// iterating it creates an Iterator for one epoch. The epoch number seeds shuffling, so
//   - the same seed and epoch always give the same order (deterministic),
//   - each new epoch gets a new order (reshuffle_each_iteration),
//   - an iterator's position (epoch, elements consumed) can be saved and restored exactly.
//
//   auto ds = Dataset::from_tensor_slices({images, labels}).shuffle(60000, 42).batch(64);
//   for (int64_t epoch = 0; epoch < 10; ++epoch)
//     for (const Element& batch : ds.iterator(epoch)) { ... batch[0], batch[1] ... }
//
// Thread safety: a Dataset may be shared by threads; an Iterator is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dist::data {

// One element of a dataset: a tuple of tensors (for example {image, label}).
using Element = std::vector<at::Tensor>;

// Special cardinalities, as tf.data.
constexpr int64_t kInfiniteCardinality = -1;
constexpr int64_t kUnknownCardinality = -2;

// Where an iterator is: the epoch it iterates and how many elements it has handed out.
// Restoring replays the pipeline up to that point (fast where a stage can skip).
struct IteratorPosition {
  int64_t epoch = 0;
  int64_t elements = 0;
  bool operator==(const IteratorPosition& o) const {
    return epoch == o.epoch && elements == o.elements;
  }
};

// What a map_with_context function learns about the element it transforms, so that random
// augmentation can be a pure function of (seed, epoch, index) and survive resume and any
// number of replicas or workers (see include/dist/data/augment.h).
//
// Both are counted at the map stage itself:
//   - epoch: the epoch the stage's iterator was created for. That is the epoch passed to
//     Dataset::iterator(epoch) unless a stage above changes it: under repeat(count),
//     repetition r of epoch e sees epoch e*count + r (e*2^32 + r for repeat(-1)), so each
//     repetition gets fresh randomness, just as it gets a fresh shuffle; under cache(), the
//     stages below it run once, at epoch 0, and their output is replayed (put random maps
//     after cache()).
//   - index: how many elements the stage's input had produced before this one in this
//     epoch, from 0 (skipped elements count: a restored iterator gives every element the
//     index it had in an uninterrupted one). Applied right after a source (before shuffle),
//     the index is the example's row in the source, its identity; after shuffle it is its
//     place in the shuffled order (still deterministic, but not tied to the example); after
//     batch it numbers the batches.
// Multi-worker input (AutoShardPolicy kData) runs the whole pipeline on every worker and
// shards the global batches afterwards, so neither value depends on the worker or replica.
struct ElementContext {
  int64_t epoch = 0;
  int64_t index = 0;
};

namespace detail {
class DatasetNode;
class IteratorNode;
}  // namespace detail

class Iterator;

class Dataset {
 public:
  // Element i is {t[i] for t in tensors}. All tensors need the same size in dimension 0.
  static Dataset from_tensor_slices(std::vector<at::Tensor> tensors);
  // Element i is the concatenation of the i-th elements; stops at the shortest dataset.
  static Dataset zip(std::vector<Dataset> datasets);

  // Applies fn to each element. fn should be deterministic: restoring a position skips
  // elements without calling fn on them.
  Dataset map(std::function<Element(Element)> fn) const;
  // Applies fn to each element with its ElementContext (epoch and index at this stage, see
  // above). fn should be a pure function of its arguments: that is what makes random
  // augmentation keyed on the context reproducible, resumable and independent of the
  // replica and worker counts. With prefetch() after it, fn runs on a background thread.
  Dataset map_with_context(std::function<Element(Element, const ElementContext&)> fn) const;
  // Shuffles with a buffer of `buffer_size` elements (as tf.data: a buffer as large as the
  // dataset gives a uniform shuffle). The order depends only on seed and epoch; with
  // reshuffle_each_iteration=false every epoch uses the order of epoch 0.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // Stacks `batch_size` consecutive elements. The last batch may be smaller unless
  // drop_remainder is true.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // Produces up to `buffer_size` elements ahead on a background thread. Same sequence.
  Dataset prefetch(int64_t buffer_size = 2) const;
  // Keeps the elements of the first complete pass in memory and replays them afterwards.
  // A pass that stops early caches nothing.
  Dataset cache() const;
  Dataset take(int64_t count) const;
  Dataset skip(int64_t count) const;
  // Repeats `count` times; -1 repeats forever. Repetition r of epoch e iterates the input at
  // epoch e*count + r, so shuffle(...).repeat(3) reshuffles on every repetition.
  Dataset repeat(int64_t count = -1) const;

  // Number of elements, kInfiniteCardinality or kUnknownCardinality.
  int64_t cardinality() const;

  // An iterator over one epoch of this dataset.
  Iterator iterator(int64_t epoch = 0) const;
  // An iterator restored at a saved position.
  Iterator iterator_at(const IteratorPosition& position) const;

  // Describes the pipeline, e.g. "from_tensor_slices(60000).shuffle(60000).batch(64)".
  std::string describe() const;

  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node);
  const std::shared_ptr<const detail::DatasetNode>& node() const { return node_; }

 private:
  std::shared_ptr<const detail::DatasetNode> node_;
};

// Iterates one epoch of a Dataset. Movable, not copyable; use from one thread.
class Iterator {
 public:
  Iterator(std::unique_ptr<detail::IteratorNode> node, int64_t epoch);
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  // The next element, or nullopt at the end of the epoch.
  std::optional<Element> next();
  // Skips up to n elements; returns how many were skipped.
  int64_t skip(int64_t n);
  IteratorPosition position() const { return {epoch_, consumed_}; }

  // Input-iterator interface so that `for (const Element& e : iterator)` works.
  class Cursor {
   public:
    explicit Cursor(Iterator* owner);
    const Element& operator*() const { return *current_; }
    const Element* operator->() const { return &*current_; }
    Cursor& operator++();
    bool operator!=(const Cursor& other) const { return owner_ != other.owner_; }

   private:
    Iterator* owner_;
    std::optional<Element> current_;
  };
  Cursor begin() { return Cursor(this); }
  Cursor end() { return Cursor(nullptr); }

 private:
  std::unique_ptr<detail::IteratorNode> node_;
  int64_t epoch_;
  int64_t consumed_ = 0;
};

}  // namespace dist::data
