// The private building blocks of a Dataset: one DatasetNode per pipeline stage, and the
// IteratorNode it creates for an epoch.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/data/dataset.h"

namespace dist::data::detail {

class IteratorNode {
 public:
  virtual ~IteratorNode() = default;
  virtual std::optional<Element> next() = 0;
  // Skips up to n elements and returns how many were skipped. Stages that can jump (slices,
  // batches of them) override this so restoring a position is fast.
  virtual int64_t skip(int64_t n) {
    int64_t skipped = 0;
    while (skipped < n && next()) ++skipped;
    return skipped;
  }
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const = 0;
  virtual int64_t cardinality() const = 0;
  virtual std::string describe() const = 0;

  // The stages this one reads from (none for a source), and a copy of this stage reading from
  // others instead: what rewriting a pipeline needs (sharding its files,
  // data/sharding/file_shard.cc). A stage that creates datasets while iterating (interleave) lists
  // only its fixed input.
  virtual std::vector<std::shared_ptr<const DatasetNode>> inputs() const { return {}; }
  virtual std::shared_ptr<const DatasetNode> with_inputs(
      std::vector<std::shared_ptr<const DatasetNode>> inputs) const;
  // True for stages that hand on their input's elements unchanged (prefetch, with_options): a
  // batch below them is still the output's batch (data/sharding/row_share.cc).
  virtual bool hands_on_elements() const { return false; }
};

using NodePtr = std::shared_ptr<const DatasetNode>;

// A stage that reads a list of files (list_files, tfrecord_dataset, image_folder): the unit
// of AutoShardPolicy::kFile, which gives each worker every N-th file.
class FileSourceNode : public DatasetNode {
 public:
  virtual const std::vector<std::string>& files() const = 0;
  // The same source over other files (a subset of files(), in their order).
  virtual NodePtr with_files(std::vector<std::string> files) const = 0;
};

// A stage with one input: inputs() and with_inputs() from its input and a copy of itself over
// another (over(), which Stage below writes), describe() from its input's and its own call().
class UnaryNode : public DatasetNode {
 public:
  explicit UnaryNode(NodePtr input) : input_(std::move(input)) {}
  std::vector<NodePtr> inputs() const override { return {input_}; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override;
  // The input's description, then "." and call(): "range(0, 8, 1).take(3)".
  std::string describe() const override;
  // The input's: a stage that changes the count overrides it.
  int64_t cardinality() const override { return input_->cardinality(); }
  const NodePtr& input() const { return input_; }

 protected:
  // This stage as a Python user would call it, "take(3)" (call_text()); empty for a stage that
  // describes as its input (with_options).
  virtual std::string call() const = 0;
  // This stage over `input` (same settings).
  virtual NodePtr over(NodePtr input) const = 0;
  NodePtr input_;
};

// The shape every one-input stage shares, written once: over() is a copy of Self with another
// input, so a stage writes only its iterator, call() and (if it changes it) cardinality(). Self
// must be copyable with its settings shared (shared_ptr, values); a stage whose copy must not
// share state (cache) overrides over(). Base: UnaryNode or one of its stage kinds below.
template <class Self, class Base = UnaryNode>
class Stage : public Base {
 public:
  using Base::Base;

 protected:
  NodePtr over(NodePtr input) const override {
    auto copy = std::make_shared<Self>(static_cast<const Self&>(*this));
    copy->input_ = std::move(input);
    return copy;
  }
};

// A Stage whose settings are one value (a count; a shared, immutable spec): the constructor and
// the member written once. The stage's iterator and call() read setting_.
template <class Self, class Setting, class Base = UnaryNode>
class SettingStage : public Stage<Self, Base> {
 public:
  SettingStage(NodePtr input, Setting setting)
      : Stage<Self, Base>(std::move(input)), setting_(std::move(setting)) {}

 protected:
  Setting setting_;
};

// A SettingStage whose epoch's iterator is Iterator(the input's iterator, setting_).
template <class Self, class Iterator, class Setting, class Base = UnaryNode>
class IteratingStage : public SettingStage<Self, Setting, Base> {
 public:
  using SettingStage<Self, Setting, Base>::SettingStage;
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<Iterator>(this->input_->make_iterator(epoch), this->setting_);
  }
};

// "[2, -1]": a shape in messages and call() texts.
std::string shape_string(const std::vector<int64_t>& shape);

// "name(a, b)": a stage's call() from its arguments, numbers written as std::to_string.
template <class T>
std::string call_argument(const T& value) {
  if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(value);
  } else {
    return std::string(value);
  }
}
template <class... Args>
std::string call_text(const std::string& name, const Args&... args) {
  std::string text = name + "(";
  const char* separator = "";
  ((text += separator + call_argument(args), separator = ", "), ...);
  return text + ")";
}

// map(fn, {num_parallel_calls > 1}) in input order: told which elements will be skipped, it does
// not compute them ahead (data/sharding/row_share.cc).
class ParallelMapStage : public UnaryNode {
 public:
  using UnaryNode::UnaryNode;
  // The same stage computing only elements whose index (at this stage) passes `computes`; the
  // others must be passed by skip(), never asked for by next().
  virtual NodePtr computing_only(std::function<bool(int64_t index)> computes) const = 0;
};

// batch() and padded_batch(): how many rows their batches hold in all, which unbatch() gives
// as its cardinality, and the same stage with smaller batches, which dividing a global batch
// among workers (kFile) builds. (padded_batch is not a BatchStage: sharing a global batch's
// rows, data/sharding/row_share.cc, stacks them without padding.)
class BatchingStage {
 public:
  virtual ~BatchingStage() = default;
  // The input's cardinality less a dropped remainder; kUnknown/kInfiniteCardinality as it.
  virtual int64_t batched_rows() const = 0;
  // Rows in a full batch, and this stage (same input, same settings) with `size` instead.
  virtual int64_t rows_per_batch() const = 0;
  virtual NodePtr with_rows_per_batch(int64_t size) const = 0;
};
// batched_rows() of a batch of `batch_size` over `input_rows` rows.
inline int64_t batched_rows_of(int64_t input_rows, int64_t batch_size, bool drop_remainder) {
  if (input_rows < 0 || !drop_remainder) return input_rows;
  return input_rows / batch_size * batch_size;
}
// The cardinality of a batch of `batch_size` over `input_rows` rows (kUnknown/kInfinite as it).
inline int64_t batches_of(int64_t input_rows, int64_t batch_size, bool drop_remainder) {
  if (input_rows < 0) return input_rows;
  return drop_remainder ? input_rows / batch_size : (input_rows + batch_size - 1) / batch_size;
}

// How batch() and padded_batch() group their input: `size` elements a batch, the last one
// shorter or (drop_remainder) dropped.
struct Batching {
  int64_t size = 1;
  bool drop_remainder = false;

  // The next batch's elements, in order; empty at the end.
  std::vector<Element> next(IteratorNode& input) const;
  // Passes up to n batches of the input; returns how many.
  int64_t skip(IteratorNode& input, int64_t n) const;
  int64_t batches(int64_t input_rows) const { return batches_of(input_rows, size, drop_remainder); }
  int64_t rows(int64_t input_rows) const {
    return batched_rows_of(input_rows, size, drop_remainder);
  }
};

// batch(): what giving each worker its part of the global batch (kFile sharding) rewrites.
class BatchStage : public UnaryNode {
 public:
  using UnaryNode::UnaryNode;
  virtual int64_t batch_size() const = 0;
  virtual bool drop_remainder() const = 0;
};

NodePtr make_tensor_slices_node(Element tensors);
NodePtr make_range_node(int64_t start, int64_t stop, int64_t step);
NodePtr make_filter_node(NodePtr input, std::function<bool(const Element&)> predicate);
NodePtr make_flat_map_node(NodePtr input, std::function<Dataset(const Element&)> fn);
NodePtr make_concatenate_node(NodePtr first, NodePtr second);
NodePtr make_unbatch_node(NodePtr input);
// padded_shapes and padding_values as Dataset::padded_batch, checked by the caller.
NodePtr make_padded_batch_node(NodePtr input, int64_t batch_size,
                               std::vector<std::vector<int64_t>> padded_shapes,
                               std::vector<at::Scalar> padding_values, bool drop_remainder);
NodePtr make_bucket_node(NodePtr input, std::function<int64_t(const Element&)> length,
                         std::vector<int64_t> boundaries, std::vector<int64_t> batch_sizes,
                         const BucketOptions& options);
NodePtr make_zip_node(std::vector<NodePtr> inputs);
NodePtr make_map_node(NodePtr input, std::function<Element(Element)> fn);
NodePtr make_map_with_context_node(NodePtr input,
                                   std::function<Element(Element, const ElementContext&)> fn);
NodePtr make_shuffle_node(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle);
NodePtr make_batch_node(NodePtr input, int64_t batch_size, bool drop_remainder);
NodePtr make_prefetch_node(NodePtr input, int64_t buffer_size);
NodePtr make_cache_node(NodePtr input);
NodePtr make_take_node(NodePtr input, int64_t count);
NodePtr make_skip_node(NodePtr input, int64_t count);
NodePtr make_repeat_node(NodePtr input, int64_t count);
NodePtr make_parallel_map_node(NodePtr input,
                               std::function<Element(Element, const ElementContext&)> fn,
                               const MapOptions& options);
NodePtr make_interleave_node(NodePtr input, std::function<Dataset(const Element&)> fn,
                             const InterleaveOptions& options);
NodePtr make_shard_node(NodePtr input, int64_t num_shards, int64_t index);
NodePtr make_generator_node(std::function<Generator(int64_t epoch)> make, int64_t cardinality);
NodePtr make_options_node(NodePtr input, const DatasetOptions& options);
// The options of the outermost options node of the pipeline (none set if there is none).
DatasetOptions options_of(const NodePtr& node);
NodePtr make_ignore_errors_node(NodePtr input, std::shared_ptr<IgnoredErrors> log);

}  // namespace dist::data::detail
