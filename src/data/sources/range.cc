// range(start, stop, step): the integers, as 0-dimensional int64 tensors; skip() jumps.
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

}  // namespace

NodePtr make_range_node(int64_t start, int64_t stop, int64_t step) {
  return std::make_shared<RangeNode>(start, stop, step);
}

}  // namespace dist::data::detail
