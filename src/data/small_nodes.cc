// Stages with little state: shard, ignore_errors and from_generator.
#include "data/dataset_node.h"
#include "dist/core/error.h"
#include "dist/data/ignored_errors.h"

namespace dist::data::detail {
namespace {

// Element k of shard `index` is the input's element index + k * num_shards.
class ShardIterator : public IteratorNode {
 public:
  ShardIterator(std::unique_ptr<IteratorNode> input, int64_t num_shards, int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), next_wanted_(index) {}
  std::optional<Element> next() override {
    if (!reach(next_wanted_)) return std::nullopt;
    auto element = input_->next();
    if (!element) return std::nullopt;
    ++position_;
    next_wanted_ += num_shards_;
    return element;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    while (skipped < n && reach(next_wanted_) && input_->skip(1) == 1) {
      ++position_;
      next_wanted_ += num_shards_;
      ++skipped;
    }
    return skipped;
  }

 private:
  // Skips the input to element `target`; false if it ends before.
  bool reach(int64_t target) {
    if (target > position_) position_ += input_->skip(target - position_);
    return position_ == target;
  }

  std::unique_ptr<IteratorNode> input_;
  int64_t num_shards_;
  int64_t next_wanted_;
  int64_t position_ = 0;  // input elements consumed
};

class ShardNode : public Stage<ShardNode> {
 public:
  ShardNode(NodePtr input, int64_t num_shards, int64_t index)
      : Stage(std::move(input)), num_shards_(num_shards), index_(index) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return std::make_unique<ShardIterator>(input_->make_iterator(epoch), num_shards_, index_);
  }
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    if (c < 0) return c;
    return c > index_ ? (c - index_ + num_shards_ - 1) / num_shards_ : 0;
  }
  std::string call() const override { return call_text("shard", num_shards_, index_); }

 private:
  int64_t num_shards_;
  int64_t index_;
};

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

class GeneratorIterator : public IteratorNode {
 public:
  explicit GeneratorIterator(Generator generator) : generator_(std::move(generator)) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    auto element = generator_();
    if (!element) done_ = true;
    return element;
  }

 private:
  Generator generator_;
  bool done_ = false;  // a generator is not asked again after its end
};

class GeneratorNode : public DatasetNode {
 public:
  GeneratorNode(std::function<Generator(int64_t)> make, int64_t cardinality)
      : make_(std::move(make)), cardinality_(cardinality) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    Generator generator = make_(epoch);
    DIST_CHECK_ARG(static_cast<bool>(generator),
                   "from_generator: the function gave no "
                   "generator for epoch ",
                   epoch, " (an empty std::function)");
    return std::make_unique<GeneratorIterator>(std::move(generator));
  }
  int64_t cardinality() const override { return cardinality_; }
  std::string describe() const override { return "from_generator()"; }

 private:
  std::function<Generator(int64_t)> make_;
  int64_t cardinality_;
};

// with_options(): elements pass through; the options are read by whoever distributes it.
class OptionsNode : public Stage<OptionsNode> {
 public:
  OptionsNode(NodePtr input, const DatasetOptions& options)
      : Stage(std::move(input)), options_(options) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    return input_->make_iterator(epoch);
  }
  std::string call() const override { return ""; }
  bool hands_on_elements() const override { return true; }
  const DatasetOptions& options() const { return options_; }

 private:
  DatasetOptions options_;
};

}  // namespace

NodePtr make_options_node(NodePtr input, const DatasetOptions& options) {
  return std::make_shared<OptionsNode>(std::move(input), options);
}

DatasetOptions options_of(const NodePtr& node) {
  DatasetOptions found;
  // Depth first from the output: the first setting met is the outermost.
  std::vector<NodePtr> pending{node};
  while (!pending.empty()) {
    NodePtr at = std::move(pending.back());
    pending.pop_back();
    if (const auto* options = dynamic_cast<const OptionsNode*>(at.get())) {
      if (!found.auto_shard_policy) found.auto_shard_policy = options->options().auto_shard_policy;
    }
    auto inputs = at->inputs();
    pending.insert(pending.end(), inputs.rbegin(), inputs.rend());
  }
  return found;
}

std::string UnaryNode::describe() const {
  const std::string own = call();
  return own.empty() ? input_->describe() : input_->describe() + "." + own;
}

NodePtr UnaryNode::with_inputs(std::vector<NodePtr> inputs) const {
  DIST_INTERNAL_ASSERT(inputs.size() == 1, describe(), " has one input, given ", inputs.size());
  return over(std::move(inputs[0]));
}

NodePtr DatasetNode::with_inputs(std::vector<NodePtr> inputs) const {
  DIST_INTERNAL_ASSERT(false, describe(), " has no inputs to replace (given ", inputs.size(), ")");
  return nullptr;
}

NodePtr make_shard_node(NodePtr input, int64_t num_shards, int64_t index) {
  return std::make_shared<ShardNode>(std::move(input), num_shards, index);
}
NodePtr make_ignore_errors_node(NodePtr input, std::shared_ptr<IgnoredErrors> log) {
  return std::make_shared<IgnoreErrorsNode>(std::move(input), std::move(log));
}
NodePtr make_generator_node(std::function<Generator(int64_t)> make, int64_t cardinality) {
  return std::make_shared<GeneratorNode>(std::move(make), cardinality);
}

}  // namespace dist::data::detail
