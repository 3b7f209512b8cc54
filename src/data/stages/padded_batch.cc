// padded_batch and bucket_by_sequence_length: batches of elements that differ in shape.
//
// Padding: for each component, the batch's shape is, dimension by dimension, the padded
// shape's fixed size or (for -1) the largest size among the batch's elements; the output is
// filled with the padding value and each element copied into its corner [0, size) of every
// dimension. Bucketing routes each element by its length to one of a few padded_batch
// queues, so a batch holds sequences of similar length and little padding; the routing is a
// function of the input's order alone, which is what makes restoring a position exact (the
// skipped batches are grouped again, only not padded).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

// What every padded batch of one stage shares.
struct PadSpec {
  std::vector<std::vector<int64_t>> shapes;  // per component; empty: all -1
  std::vector<at::Scalar> values;            // per component; empty: 0
  const char* stage = "padded_batch";
};

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t d = 0; d < shape.size(); ++d) s << (d ? ", " : "") << shape[d];
  s << "]";
  return s.str();
}

void check_pad_spec(const PadSpec& spec) {
  for (size_t k = 0; k < spec.shapes.size(); ++k)
    for (size_t d = 0; d < spec.shapes[k].size(); ++d)
      DIST_CHECK_ARG(spec.shapes[k][d] >= -1, spec.stage, ": padded_shapes[", k, "] is ",
                     shape_string(spec.shapes[k]), "; dimension ", d,
                     " must be a size (0 or more) or -1 for the longest in the batch");
}

// The shape component k of the batch pads to (without the batch dimension). `unknown`, if at
// least 0, replaces -1 (pad_to_bucket_boundary).
std::vector<int64_t> target_shape(const std::vector<Element>& elements, size_t k,
                                  const PadSpec& spec, int64_t unknown) {
  const int64_t rank = elements.front()[k].dim();
  std::vector<int64_t> target(static_cast<size_t>(rank), -1);
  if (!spec.shapes.empty()) {
    const auto& padded = spec.shapes[k];
    DIST_CHECK_ARG(static_cast<int64_t>(padded.size()) == rank, spec.stage, ": padded_shapes[", k,
                   "] is ", shape_string(padded), " (rank ", padded.size(), ") but component ", k,
                   " has rank ", rank, " (shape ", elements.front()[k].sizes(),
                   "); give one size or -1 per dimension");
    target = padded;
  }
  for (auto& t : target)
    if (t == -1 && unknown >= 0) t = unknown;
  std::vector<int64_t> longest(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < elements.size(); ++i) {
    const at::Tensor& c = elements[i][k];
    DIST_CHECK_ARG(c.dim() == rank, spec.stage, ": component ", k, " of element ", i, " has shape ",
                   c.sizes(), " but element 0's has ", elements.front()[k].sizes(),
                   "; padding needs one rank per component");
    DIST_CHECK_ARG(c.scalar_type() == elements.front()[k].scalar_type(), spec.stage, ": component ",
                   k, " of element ", i, " is ", c.scalar_type(), " but element 0's is ",
                   elements.front()[k].scalar_type());
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t size = c.size(d);
      const int64_t fixed = target[static_cast<size_t>(d)];
      DIST_CHECK_ARG(fixed < 0 || size <= fixed, spec.stage, ": component ", k, " of element ", i,
                     " in the batch has shape ", c.sizes(), ", larger than its padded shape ",
                     shape_string(target), " in dimension ", d, " (", size, " > ", fixed,
                     "); raise the padded shape, or truncate or filter the longer elements");
      longest[static_cast<size_t>(d)] = std::max(longest[static_cast<size_t>(d)], size);
    }
  }
  for (size_t d = 0; d < target.size(); ++d)
    if (target[d] < 0) target[d] = longest[d];
  return target;
}

// Copies `c` into the corner [0, size) of every dimension of row i of `out` (made contiguous
// here, of c's dtype). A contiguous CPU element goes by memcpy, one run per row of its last
// dimension, rather than by select/narrow/copy_: a tensor op per element costs more than the
// copy itself for token sequences (it halved padded_batch's rate against batch's).
void copy_corner(const at::Tensor& out, int64_t i, const at::Tensor& c) {
  if (!c.is_contiguous() || !c.device().is_cpu() || !out.device().is_cpu()) {
    at::Tensor corner = out.select(0, i);
    for (int64_t d = 0; d < c.dim(); ++d) corner = corner.narrow(d, 0, c.size(d));
    corner.copy_(c);
    return;
  }
  if (c.numel() == 0) return;
  const auto item = static_cast<int64_t>(c.element_size());
  char* base = static_cast<char*>(out.data_ptr()) + i * out.stride(0) * item;
  const auto* from = static_cast<const char*>(c.data_ptr());
  const int64_t rank = c.dim();
  if (rank == 0) {
    std::memcpy(base, from, static_cast<size_t>(item));
    return;
  }
  const int64_t run = c.size(rank - 1) * item;
  const int64_t runs = c.numel() / c.size(rank - 1);
  std::vector<int64_t> index(static_cast<size_t>(rank - 1), 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d + 1 < rank; ++d)
      offset += index[static_cast<size_t>(d)] * out.stride(d + 1);
    std::memcpy(base + offset * item, from + r * run, static_cast<size_t>(run));
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < c.size(d)) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

Element pad_elements(const std::vector<Element>& elements, const PadSpec& spec,
                     int64_t unknown = -1) {
  const size_t arity = elements.front().size();
  for (size_t i = 0; i < elements.size(); ++i)
    DIST_CHECK_ARG(elements[i].size() == arity, spec.stage, ": element ", i, " has ",
                   elements[i].size(), " components but element 0 has ", arity);
  DIST_CHECK_ARG(spec.shapes.empty() || spec.shapes.size() == arity, spec.stage,
                 ": padded_shapes has ", spec.shapes.size(), " entries but the elements have ",
                 arity, " components; give one per component");
  DIST_CHECK_ARG(spec.values.empty() || spec.values.size() == arity, spec.stage,
                 ": padding_values has ", spec.values.size(), " entries but the elements have ",
                 arity, " components; give one per component");
  Element batch;
  batch.reserve(arity);
  const auto n = static_cast<int64_t>(elements.size());
  for (size_t k = 0; k < arity; ++k) {
    std::vector<int64_t> shape = target_shape(elements, k, spec, unknown);
    shape.insert(shape.begin(), n);
    const at::Tensor& first = elements.front()[k];
    const at::Scalar value = spec.values.empty() ? at::Scalar(0) : spec.values[k];
    at::Tensor out = at::full(shape, value, first.options());
    for (int64_t i = 0; i < n; ++i) copy_corner(out, i, elements[static_cast<size_t>(i)][k]);
    batch.push_back(std::move(out));
  }
  batch.set_names(elements.front().shared_names());
  return batch;
}

std::string describe_spec(const PadSpec& spec) {
  std::string s;
  if (!spec.shapes.empty()) {
    s += ", padded_shapes=[";
    for (size_t k = 0; k < spec.shapes.size(); ++k)
      s += (k ? ", " : "") + shape_string(spec.shapes[k]);
    s += "]";
  }
  if (!spec.values.empty()) {
    std::ostringstream v;
    v << ", padding_values=[";
    for (size_t k = 0; k < spec.values.size(); ++k)
      v << (k ? ", " : "") << spec.values[k].toDouble();
    v << "]";
    s += v.str();
  }
  return s;
}

class PaddedBatchIterator : public IteratorNode {
 public:
  PaddedBatchIterator(std::unique_ptr<IteratorNode> input, int64_t size, bool drop_remainder,
                      std::shared_ptr<const PadSpec> spec)
      : input_(std::move(input)), size_(size), drop_(drop_remainder), spec_(std::move(spec)) {}
  std::optional<Element> next() override {
    std::vector<Element> elements;
    elements.reserve(static_cast<size_t>(size_));
    while (static_cast<int64_t>(elements.size()) < size_) {
      auto element = input_->next();
      if (!element) break;
      elements.push_back(std::move(*element));
    }
    if (elements.empty()) return std::nullopt;
    if (drop_ && static_cast<int64_t>(elements.size()) < size_) return std::nullopt;
    return pad_elements(elements, *spec_);
  }
  int64_t skip(int64_t n) override {
    const int64_t inner = input_->skip(n * size_);
    return inner / size_ + (inner % size_ != 0 && !drop_ ? 1 : 0);
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  int64_t size_;
  bool drop_;
  std::shared_ptr<const PadSpec> spec_;
};

class PaddedBatchNode : public Stage<PaddedBatchNode>, public BatchingStage {
 public:
  PaddedBatchNode(NodePtr input, int64_t size, bool drop_remainder,
                  std::shared_ptr<const PadSpec> spec)
      : Stage(std::move(input)), size_(size), drop_(drop_remainder), spec_(std::move(spec)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<PaddedBatchIterator>(input_->make_iterator(epoch), size_, drop_, spec_);
  }
  int64_t cardinality() const override { return batches_of(input_->cardinality(), size_, drop_); }
  int64_t batched_rows() const override {
    return batched_rows_of(input_->cardinality(), size_, drop_);
  }
  int64_t rows_per_batch() const override { return size_; }
  NodePtr with_rows_per_batch(int64_t size) const override {
    return std::make_shared<PaddedBatchNode>(input_, size, drop_, spec_);
  }
  std::string call() const override {
    return "padded_batch(" + std::to_string(size_) + describe_spec(*spec_) +
           (drop_ ? ", drop_remainder" : "") + ")";
  }

 private:
  int64_t size_;
  bool drop_;
  std::shared_ptr<const PadSpec> spec_;
};

// ---- bucket_by_sequence_length ----

struct BucketSpec {
  std::function<int64_t(const Element&)> length;
  std::vector<int64_t> boundaries;
  std::vector<int64_t> batch_sizes;
  bool pad_to_boundary = false;
  bool drop_remainder = false;
  PadSpec pad;
};

class BucketIterator : public IteratorNode {
 public:
  BucketIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const BucketSpec> spec)
      : input_(std::move(input)),
        spec_(std::move(spec)),
        buckets_(spec_->batch_sizes.size()),
        counted_(0) {}

  std::optional<Element> next() override {
    auto group = next_group();
    if (!group) return std::nullopt;
    const int64_t unknown =
        spec_->pad_to_boundary ? spec_->boundaries[static_cast<size_t>(*group)] - 1 : -1;
    Element batch = pad_elements(buckets_[static_cast<size_t>(*group)], spec_->pad, unknown);
    buckets_[static_cast<size_t>(*group)].clear();
    return batch;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    for (; skipped < n; ++skipped) {
      auto group = next_group();
      if (!group) break;
      buckets_[static_cast<size_t>(*group)].clear();
    }
    return skipped;
  }

 private:
  // Fills buckets until one is ready and returns its index (its elements stay in buckets_ for
  // the caller to pad or drop), or nullopt at the end.
  std::optional<int64_t> next_group() {
    while (!input_done_) {
      auto element = input_->next();
      if (!element) {
        input_done_ = true;
        break;
      }
      const int64_t bucket = bucket_of(*element);
      auto& queue = buckets_[static_cast<size_t>(bucket)];
      queue.push_back(std::move(*element));
      ++counted_;
      if (static_cast<int64_t>(queue.size()) == spec_->batch_sizes[static_cast<size_t>(bucket)])
        return bucket;
    }
    // The partial buckets, in bucket order.
    for (; flush_ < buckets_.size(); ++flush_) {
      if (buckets_[flush_].empty() || spec_->drop_remainder) continue;
      return static_cast<int64_t>(flush_++);
    }
    return std::nullopt;
  }

  int64_t bucket_of(const Element& element) const {
    const int64_t length = spec_->length(element);
    DIST_CHECK_ARG(length >= 0, "bucket_by_sequence_length: element_length_func gave ", length,
                   " for input element ", counted_, " ", element.describe(),
                   "; a length must be 0 or more");
    const auto& b = spec_->boundaries;
    const auto bucket =
        static_cast<int64_t>(std::upper_bound(b.begin(), b.end(), length) - b.begin());
    DIST_CHECK_ARG(!spec_->pad_to_boundary || bucket < static_cast<int64_t>(b.size()),
                   "bucket_by_sequence_length: input element ", counted_, " has length ", length,
                   ", in the last bucket (from ", b.empty() ? 0 : b.back(),
                   " up), which has no boundary to pad to under pad_to_bucket_boundary; add a "
                   "boundary above the longest element or filter the longer ones");
    return bucket;
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const BucketSpec> spec_;
  std::vector<std::vector<Element>> buckets_;
  int64_t counted_;  // input elements read, for errors
  bool input_done_ = false;
  size_t flush_ = 0;
};

class BucketNode : public Stage<BucketNode> {
 public:
  BucketNode(NodePtr input, std::shared_ptr<const BucketSpec> spec)
      : Stage(std::move(input)), spec_(std::move(spec)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<BucketIterator>(input_->make_iterator(epoch), spec_);
  }
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    return c == 0 || c == kInfiniteCardinality ? c : kUnknownCardinality;
  }
  std::string call() const override {
    return "bucket_by_sequence_length(boundaries=" + shape_string(spec_->boundaries) +
           ", batch_sizes=" + shape_string(spec_->batch_sizes) + describe_spec(spec_->pad) +
           (spec_->pad_to_boundary ? ", pad_to_bucket_boundary" : "") +
           (spec_->drop_remainder ? ", drop_remainder" : "") + ")";
  }

 private:
  std::shared_ptr<const BucketSpec> spec_;
};

}  // namespace

NodePtr make_padded_batch_node(NodePtr input, int64_t batch_size,
                               std::vector<std::vector<int64_t>> padded_shapes,
                               std::vector<at::Scalar> padding_values, bool drop_remainder) {
  auto spec = std::make_shared<PadSpec>();
  spec->shapes = std::move(padded_shapes);
  spec->values = std::move(padding_values);
  check_pad_spec(*spec);
  return std::make_shared<PaddedBatchNode>(std::move(input), batch_size, drop_remainder,
                                           std::move(spec));
}

NodePtr make_bucket_node(NodePtr input, std::function<int64_t(const Element&)> length,
                         std::vector<int64_t> boundaries, std::vector<int64_t> batch_sizes,
                         const BucketOptions& options) {
  DIST_CHECK_ARG(batch_sizes.size() == boundaries.size() + 1,
                 "bucket_by_sequence_length: bucket_batch_sizes has ", batch_sizes.size(),
                 " entries for ", boundaries.size(), " bucket_boundaries; give ",
                 boundaries.size() + 1,
                 " (one per bucket: below the first boundary, between "
                 "each two, and from the last up)");
  for (size_t i = 0; i < boundaries.size(); ++i)
    DIST_CHECK_ARG(boundaries[i] >= 1 && (i == 0 || boundaries[i] > boundaries[i - 1]),
                   "bucket_by_sequence_length: bucket_boundaries ", shape_string(boundaries),
                   " must increase strictly from 1 up (entry ", i, " is ", boundaries[i], ")");
  for (size_t i = 0; i < batch_sizes.size(); ++i)
    DIST_CHECK_ARG(batch_sizes[i] >= 1, "bucket_by_sequence_length: bucket_batch_sizes[", i,
                   "] is ", batch_sizes[i], "; each must be at least 1");
  auto spec = std::make_shared<BucketSpec>();
  spec->length = std::move(length);
  spec->boundaries = std::move(boundaries);
  spec->batch_sizes = std::move(batch_sizes);
  spec->pad_to_boundary = options.pad_to_bucket_boundary;
  spec->drop_remainder = options.drop_remainder;
  spec->pad.shapes = options.padded_shapes;
  spec->pad.values = options.padding_values;
  spec->pad.stage = "bucket_by_sequence_length";
  check_pad_spec(spec->pad);
  return std::make_shared<BucketNode>(std::move(input), std::move(spec));
}

}  // namespace dist::data::detail
