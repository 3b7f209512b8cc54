// The private building blocks of a Dataset: one DatasetNode per pipeline stage, and the
// IteratorNode it creates for an epoch.
#pragma once

#include <memory>
#include <optional>
#include <string>

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
};

using NodePtr = std::shared_ptr<const DatasetNode>;

NodePtr make_tensor_slices_node(std::vector<at::Tensor> tensors);
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

}  // namespace dist::data::detail
