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
// Components may be named, as tf.data's dicts (see dist/data/element.h):
//   auto ds = Dataset::from_tensor_slices({{"image", images}, {"label", labels}}).batch(64);
//   ... batch["image"], batch["label"] ...
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
#include <c10/core/Scalar.h>

#include "dist/data/auto_shard_policy.h"
#include "dist/data/element.h"

namespace dist::data {

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

// A source of elements for Dataset::from_generator: each call gives the next element, or
// nullopt at the end of the epoch.
using Generator = std::function<std::optional<Element>()>;

// num_parallel_calls: let the library choose (the machine's hardware threads), as tf.data's
// AUTOTUNE.
constexpr int64_t kAutotune = -1;

struct MapOptions {
  // Threads applying the function (1: on the iterating thread; kAutotune: one per hardware
  // thread). The function must then be safe to call from several threads at once.
  int64_t num_parallel_calls = 1;
  // true: the output keeps the input's order, whatever the threads' timing (the default, and
  // what exact training needs). false: an element is handed out as soon as it is ready, which
  // can hide one slow element but makes the order depend on timing.
  bool deterministic = true;
};

struct InterleaveOptions {
  // How many input elements' datasets are read at once (round robin).
  int64_t cycle_length = 1;
  // Consecutive elements taken from one dataset before moving to the next.
  int64_t block_length = 1;
  // Datasets of the cycle read ahead on threads of their own (at most cycle_length threads;
  // 1: none). The order is the same either way.
  int64_t num_parallel_calls = 1;
};

// Options a dataset carries to the code that distributes it (tf.data.Options).
struct DatasetOptions {
  // How experimental_distribute_dataset divides it among workers, unless DistributeOptions
  // names a policy other than kAuto; unset: kAuto.
  std::optional<AutoShardPolicy> auto_shard_policy;
};

// The optional parts of Dataset::bucket_by_sequence_length (tf.data's
// bucket_by_sequence_length arguments of the same names).
struct BucketOptions {
  // As padded_batch's: per component, -1 for "the longest in the batch"; empty: every
  // dimension of every component padded to the longest in the batch.
  std::vector<std::vector<int64_t>> padded_shapes;
  // As padded_batch's: per component; empty: 0 everywhere.
  std::vector<at::Scalar> padding_values;
  // true: the -1 dimensions of a batch of bucket i are padded to bucket_boundaries[i] - 1 (the
  // longest length the bucket holds) rather than to the batch's longest, so every batch of a
  // bucket has one shape; an element of the last, unbounded bucket is then an error.
  bool pad_to_bucket_boundary = false;
  // true: a bucket's last, partial batch is dropped at the end of the input.
  bool drop_remainder = false;
};

class IgnoredErrors;  // dist/data/ignored_errors.h

namespace detail {
class DatasetNode;
class IteratorNode;
}  // namespace detail

class Iterator;

class Dataset {
 public:
  // Element i is {t[i] for t in tensors}, with the names of `tensors` if it has them:
  // from_tensor_slices({images, labels}) or from_tensor_slices({{"image", images}, {"label",
  // labels}}). All tensors need the same size in dimension 0.
  static Dataset from_tensor_slices(Element tensors);
  // The int64 scalars start, start + step, ... up to stop, excluded (tf.data's range; step may
  // be negative, not 0).
  static Dataset range(int64_t start, int64_t stop, int64_t step = 1);
  static Dataset range(int64_t stop) { return range(0, stop, 1); }
  // Element i is the concatenation of the i-th elements; stops at the shortest dataset. When
  // every input's elements are named, so is the output (the names must then differ).
  static Dataset zip(std::vector<Dataset> datasets);
  // Elements from a C++ callable: make_generator(epoch) is called once per epoch (and on each
  // restore) and must give the same sequence for the same epoch, as restoring a position
  // replays it. `cardinality` is what the generator will yield, if known.
  static Dataset from_generator(std::function<Generator(int64_t epoch)> make_generator,
                                int64_t cardinality = kUnknownCardinality);

  // Applies fn to each element. fn should be deterministic: restoring a position skips
  // elements without calling fn on them.
  Dataset map(std::function<Element(Element)> fn) const;
  // Applies fn to each element with its ElementContext (epoch and index at this stage, see
  // above). fn should be a pure function of its arguments: that is what makes random
  // augmentation keyed on the context reproducible, resumable and independent of the
  // replica and worker counts. With prefetch() after it, fn runs on a background thread.
  Dataset map_with_context(std::function<Element(Element, const ElementContext&)> fn) const;
  // The same on several threads (decoding images, parsing records): see MapOptions. With the
  // default deterministic order the output is exactly the sequential map's.
  Dataset map(std::function<Element(Element)> fn, const MapOptions& options) const;
  Dataset map_with_context(std::function<Element(Element, const ElementContext&)> fn,
                           const MapOptions& options) const;
  // Maps each element to a dataset and interleaves their elements (tf.data's interleave):
  // cycle_length datasets are open at once; block_length elements are taken from each in
  // turn; a finished dataset's place goes to the next element's dataset. The typical use reads
  // several files at once:
  //   list_files("shards/*.tfrecord", true, seed).interleave(
  //       [](const Element& f) { return tfrecord_dataset({string_of(f[0])}); }, {4, 1});
  Dataset interleave(std::function<Dataset(const Element&)> fn,
                     const InterleaveOptions& options) const;
  // Maps each element to a dataset and gives all elements of each in turn (tf.data's
  // flat_map; interleave with cycle_length 1). The datasets are iterated at this stage's
  // epoch, so fn may return shuffled ones. The cardinality is unknown.
  Dataset flat_map(std::function<Dataset(const Element&)> fn) const;
  // Keeps the elements for which predicate is true (tf.data's filter). The predicate should
  // be deterministic: restoring a position evaluates it again on the elements passed. The
  // cardinality becomes unknown.
  Dataset filter(std::function<bool(const Element&)> predicate) const;
  // This dataset's elements, then `other`'s (tf.data's concatenate), both at the same epoch.
  Dataset concatenate(const Dataset& other) const;
  // Splits each element along dimension 0 into its rows (tf.data's unbatch; the inverse of
  // batch). Every component needs the same size in dimension 0 (InvalidArgument naming the
  // component otherwise). Names are kept. The cardinality is known when the input is a
  // batch() or padded_batch() of a dataset of known cardinality.
  Dataset unbatch() const;
  // Keeps elements index, index + num_shards, index + 2 num_shards, ... (tf.data's shard).
  // Applied to list_files(...), it gives each input pipeline its own files.
  Dataset shard(int64_t num_shards, int64_t index) const;
  // Skips the elements whose production failed with a DataError (a corrupt record, an image
  // that does not decode) instead of stopping, counting them in `log` if given (tf.data's
  // ignore_errors). Put it right after the stage that may fail: a batch() or prefetch() below
  // it would lose the elements around the failure. The cardinality becomes unknown.
  Dataset ignore_errors(std::shared_ptr<IgnoredErrors> log = nullptr) const;
  // Shuffles with a buffer of `buffer_size` elements (as tf.data: a buffer as large as the
  // dataset gives a uniform shuffle). The order depends only on seed and epoch; with
  // reshuffle_each_iteration=false every epoch uses the order of epoch 0.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // Stacks `batch_size` consecutive elements. The last batch may be smaller unless
  // drop_remainder is true.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // Stacks `batch_size` consecutive elements whose components may differ in shape, padding
  // each component to a common shape (tf.data's padded_batch). padded_shapes: per component,
  // the shape to pad to (its rank must be the component's), where -1 means "the longest in
  // the batch"; empty: every dimension of every component is padded to the longest in the
  // batch. An element larger than a fixed padded dimension is an InvalidArgument naming the
  // element, component and dimension. padding_values: per component, the value filled in
  // (converted to the component's dtype); empty: 0. Names are kept.
  //   tokens.padded_batch(32)                    // [32, longest] of 0-padded sequences
  //   ds.padded_batch(32, {{128}, {}}, {-1, 0})  // pad component 0 to 128 with -1
  Dataset padded_batch(int64_t batch_size, std::vector<std::vector<int64_t>> padded_shapes = {},
                       std::vector<at::Scalar> padding_values = {},
                       bool drop_remainder = false) const;
  // Groups elements by length into buckets and gives padded batches of each
  // (tf.data.experimental.bucket_by_sequence_length): an element of length L
  // (element_length_func) goes to bucket i where bucket_boundaries[i-1] <= L <
  // bucket_boundaries[i] (bucket 0 below the first boundary, the last at or above the last);
  // a bucket that holds bucket_batch_sizes[i] elements is given as one padded batch (see
  // padded_batch; padding in BucketOptions). At the end of the input the partial buckets
  // follow in bucket order, so the output is a function of the input's order only
  // (deterministic, and restored exactly). bucket_boundaries must increase strictly from 1 up;
  // bucket_batch_sizes has one more entry than bucket_boundaries, each at least 1. The
  // cardinality is unknown.
  Dataset bucket_by_sequence_length(std::function<int64_t(const Element&)> element_length_func,
                                    std::vector<int64_t> bucket_boundaries,
                                    std::vector<int64_t> bucket_batch_sizes,
                                    const BucketOptions& options = {}) const;
  // Produces up to `buffer_size` elements ahead on a background thread. Same sequence. That
  // thread (and a parallel map's) runs ATen with the intra-op thread count of the thread that
  // iterates, and is kept for later epochs.
  Dataset prefetch(int64_t buffer_size = 2) const;
  // Keeps the elements of the first complete pass in memory and replays them afterwards.
  // A pass that stops early caches nothing.
  Dataset cache() const;
  Dataset take(int64_t count) const;
  Dataset skip(int64_t count) const;
  // Repeats `count` times; -1 repeats forever. Repetition r of epoch e iterates the input at
  // epoch e*count + r, so shuffle(...).repeat(3) reshuffles on every repetition.
  Dataset repeat(int64_t count = -1) const;

  // The same dataset carrying `options` (the set ones replace those set below).
  Dataset with_options(const DatasetOptions& options) const;
  // The options set by with_options anywhere in the pipeline (the outermost wins).
  DatasetOptions options() const;

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
