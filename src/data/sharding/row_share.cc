#include "data/sharding/row_share.h"

#include <ATen/ATen.h>

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

Element stack_rows(const std::vector<Element>& rows) {
  Element batch;
  std::vector<at::Tensor> parts(rows.size());
  for (size_t k = 0; k < rows.front().size(); ++k) {
    for (size_t i = 0; i < rows.size(); ++i) parts[i] = rows[i].at(k);
    batch.push_back(at::stack(parts));
  }
  batch.set_names(rows.front().shared_names());
  return batch;
}

class ShareBatchIterator : public IteratorNode {
 public:
  ShareBatchIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const RowShare> share)
      : input_(std::move(input)), share_(std::move(share)) {}

  std::optional<Element> next() override {
    const int64_t rows = share_->rows_of_batch(batch_);
    if (rows == 0) return std::nullopt;
    const auto [lo, hi] = share_->own_rows(rows);
    const auto [first, end] = share_->fetched_rows(rows);
    pass(first);
    std::vector<Element> fetched;
    for (int64_t r = first; r < end; ++r) {
      auto element = input_->next();
      DIST_CHECK(element.has_value(), DataError, "the input of the global batch ended ", r,
                 " rows into batch ", batch_, " of ", rows,
                 " rows: a stage below reports a wrong cardinality");
      fetched.push_back(std::move(*element));
    }
    pass(rows - end);
    ++batch_;
    Element batch = stack_rows(fetched);
    if (hi == lo)
      for (auto& t : batch) t = t.narrow(0, 0, 0);  // no rows here; the shapes for the others
    return batch;
  }

  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    for (; skipped < n; ++skipped) {
      const int64_t rows = share_->rows_of_batch(batch_);
      if (rows == 0) break;
      pass(rows);
      ++batch_;
    }
    return skipped;
  }

 private:
  void pass(int64_t rows) {
    if (rows == 0) return;
    const int64_t passed = input_->skip(rows);
    DIST_CHECK(passed == rows, DataError, "the input of the global batch ended while passing ",
               rows, " rows of batch ", batch_, " (", passed,
               " passed): a stage below reports a wrong cardinality");
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const RowShare> share_;
  int64_t batch_ = 0;
};

class ShareBatchNode
    : public IteratingStage<ShareBatchNode, ShareBatchIterator, std::shared_ptr<const RowShare>> {
 public:
  using IteratingStage::IteratingStage;
  int64_t cardinality() const override { return setting_->batches(); }
  std::string call() const override {
    return call_text("batch", setting_->batch_size(), "this worker's rows");
  }
};

}  // namespace

RowShare::RowShare(int64_t batch_size, int64_t input_rows, bool drop_remainder,
                   ReplicaRows replicas)
    : batch_size_(batch_size),
      input_rows_(input_rows),
      drop_remainder_(drop_remainder),
      replicas_(replicas) {
  DIST_INTERNAL_ASSERT(replicas_.all >= 1 && replicas_.first >= 0 && replicas_.count >= 0 &&
                           replicas_.first + replicas_.count <= replicas_.all,
                       "replicas ", replicas_.first, " + ", replicas_.count, " of ", replicas_.all);
}

int64_t RowShare::batches() const {
  return drop_remainder_ ? input_rows_ / batch_size_
                         : (input_rows_ + batch_size_ - 1) / batch_size_;
}

int64_t RowShare::rows_of_batch(int64_t batch) const {
  const int64_t left = input_rows_ - batch * batch_size_;
  if (left <= 0) return 0;
  if (left < batch_size_) return drop_remainder_ ? 0 : left;
  return batch_size_;
}

std::pair<int64_t, int64_t> RowShare::fetched_rows(int64_t rows) const {
  const auto [lo, hi] = own_rows(rows);
  if (hi > lo) return {lo, hi};
  const int64_t one = std::min(lo, rows - 1);
  return {one, one + 1};
}

bool RowShare::fetches(int64_t index) const {
  const int64_t batch = index / batch_size_;
  const int64_t rows = rows_of_batch(batch);
  if (rows == 0) return false;
  const auto [first, end] = fetched_rows(rows);
  const int64_t row = index % batch_size_;
  return row >= first && row < end;
}

std::optional<std::pair<Dataset, std::shared_ptr<const RowShare>>> share_rows(
    const Dataset& dataset, ReplicaRows replicas) {
  // Down from the output to the global batch, through stages that hand elements on.
  std::vector<NodePtr> above;
  NodePtr at = dataset.node();
  while (at->hands_on_elements()) {
    above.push_back(at);
    at = at->inputs().at(0);
  }
  const auto* batch = dynamic_cast<const BatchStage*>(at.get());
  if (batch == nullptr) return std::nullopt;
  const int64_t input_rows = batch->input()->cardinality();
  if (input_rows < 0) return std::nullopt;
  auto share = std::make_shared<const RowShare>(batch->batch_size(), input_rows,
                                                batch->drop_remainder(), replicas);
  NodePtr input = batch->input();
  if (const auto* map = dynamic_cast<const ParallelMapStage*>(input.get()))
    if (auto told = map->computing_only([share](int64_t i) { return share->fetches(i); }))
      input = std::move(told);
  NodePtr rebuilt = std::make_shared<ShareBatchNode>(std::move(input), share);
  for (auto it = above.rbegin(); it != above.rend(); ++it) rebuilt = (*it)->with_inputs({rebuilt});
  return std::make_pair(Dataset(rebuilt), std::shared_ptr<const RowShare>(share));
}

}  // namespace dist::data::detail
