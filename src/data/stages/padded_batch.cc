// padded_batch: batches of elements that differ in shape, and the padding it shares with
// bucket_by_sequence_length (padding.h).
//
// Padding: for each component, the batch's shape is, dimension by dimension, the padded
// shape's fixed size or (for -1) the largest size among the batch's elements; the output is
// filled with the padding value and each element copied into its corner [0, size) of every
// dimension.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "data/dataset_node.h"
#include "data/stages/padding.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

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

}  // namespace

void check_pad_spec(const PadSpec& spec) {
  for (size_t k = 0; k < spec.shapes.size(); ++k)
    for (size_t d = 0; d < spec.shapes[k].size(); ++d)
      DIST_CHECK_ARG(spec.shapes[k][d] >= -1, spec.stage, ": padded_shapes[", k, "] is ",
                     shape_string(spec.shapes[k]), "; dimension ", d,
                     " must be a size (0 or more) or -1 for the longest in the batch");
}

Element pad_elements(const std::vector<Element>& elements, const PadSpec& spec, int64_t unknown) {
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

namespace {

// The settings of one padded_batch stage.
struct PaddedBatching {
  Batching batching;
  std::shared_ptr<const PadSpec> pad;
};

class PaddedBatchIterator : public IteratorNode {
 public:
  PaddedBatchIterator(std::unique_ptr<IteratorNode> input, PaddedBatching settings)
      : input_(std::move(input)), settings_(std::move(settings)) {}
  std::optional<Element> next() override {
    const std::vector<Element> elements = settings_.batching.next(*input_);
    if (elements.empty()) return std::nullopt;
    return pad_elements(elements, *settings_.pad);
  }
  int64_t skip(int64_t n) override { return settings_.batching.skip(*input_, n); }

 private:
  std::unique_ptr<IteratorNode> input_;
  PaddedBatching settings_;
};

class PaddedBatchNode : public IteratingStage<PaddedBatchNode, PaddedBatchIterator, PaddedBatching>,
                        public BatchingStage {
 public:
  using IteratingStage::IteratingStage;
  int64_t cardinality() const override { return setting_.batching.batches(input_->cardinality()); }
  int64_t batched_rows() const override { return setting_.batching.rows(input_->cardinality()); }
  int64_t rows_per_batch() const override { return setting_.batching.size; }
  NodePtr with_rows_per_batch(int64_t size) const override {
    return std::make_shared<PaddedBatchNode>(
        input_, PaddedBatching{{size, setting_.batching.drop_remainder}, setting_.pad});
  }
  std::string call() const override {
    return "padded_batch(" + std::to_string(setting_.batching.size) + describe_spec(*setting_.pad) +
           (setting_.batching.drop_remainder ? ", drop_remainder" : "") + ")";
  }
};

}  // namespace

NodePtr make_padded_batch_node(NodePtr input, int64_t batch_size,
                               std::vector<std::vector<int64_t>> padded_shapes,
                               std::vector<at::Scalar> padding_values, bool drop_remainder) {
  auto spec = std::make_shared<PadSpec>();
  spec->shapes = std::move(padded_shapes);
  spec->values = std::move(padding_values);
  check_pad_spec(*spec);
  return std::make_shared<PaddedBatchNode>(
      std::move(input), PaddedBatching{{batch_size, drop_remainder}, std::move(spec)});
}

}  // namespace dist::data::detail
