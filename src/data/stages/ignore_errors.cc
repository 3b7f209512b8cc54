// ignore_errors(): elements that fail with a DataError are logged and passed over.
#include "data/dataset_node.h"
#include "dist/core/error.h"
#include "dist/data/ignored_errors.h"

namespace dist::data::detail {
namespace {

class IgnoreErrorsIterator : public IteratorNode {
 public:
  IgnoreErrorsIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<IgnoredErrors> log)
      : input_(std::move(input)), log_(std::move(log)) {}
  std::optional<Element> next() override {
    // Every stage that throws a DataError has consumed the bad element (a record whose CRC
    // fails is passed by its length; a truncated file ends its reader), so asking again moves
    // on; the bound only guards against a stage that keeps failing in place.
    for (int64_t failures = 0;; ++failures) {
      try {
        return input_->next();
      } catch (const DataError& e) {
        if (log_) log_->record(e.what());
        DIST_CHECK(failures < kMaxConsecutiveFailures, DataError,
                   "ignore_errors: ", kMaxConsecutiveFailures,
                   " consecutive elements failed, the last with: ", e.what(),
                   "; the input seems unable to move past the damage");
      }
    }
  }

 private:
  static constexpr int64_t kMaxConsecutiveFailures = 1000000;
  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<IgnoredErrors> log_;
};

class IgnoreErrorsNode : public Stage<IgnoreErrorsNode> {
 public:
  IgnoreErrorsNode(NodePtr input, std::shared_ptr<IgnoredErrors> log)
      : Stage(std::move(input)), log_(std::move(log)) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<IgnoreErrorsIterator>(input_->make_iterator(epoch), log_);
  }
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    return c == 0 || c == kInfiniteCardinality ? c : kUnknownCardinality;
  }
  std::string call() const override { return "ignore_errors()"; }

 private:
  std::shared_ptr<IgnoredErrors> log_;
};

}  // namespace

NodePtr make_ignore_errors_node(NodePtr input, std::shared_ptr<IgnoredErrors> log) {
  return std::make_shared<IgnoreErrorsNode>(std::move(input), std::move(log));
}

}  // namespace dist::data::detail
