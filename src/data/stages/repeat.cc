// repeat(count): the input again, count times (forever if negative), each pass its own epoch.
#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

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

// setting_: the count.
class RepeatNode : public SettingStage<RepeatNode, int64_t> {
 public:
  using SettingStage::SettingStage;
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<RepeatIterator>(input_, setting_, epoch);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (setting_ == 0 || c == 0) return 0;
    if (c == kUnknownCardinality) return c;
    if (setting_ < 0 || c == kInfiniteCardinality) return kInfiniteCardinality;
    return c * setting_;
  }
  std::string call() const override { return call_text("repeat", setting_); }
};

}  // namespace

NodePtr make_repeat_node(NodePtr input, int64_t count) {
  return std::make_shared<RepeatNode>(std::move(input), count);
}

}  // namespace dist::data::detail
