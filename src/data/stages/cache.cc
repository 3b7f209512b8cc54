// cache(): the first complete pass is kept in memory and replayed by later epochs, as
// tf.data's in-memory cache. A pass abandoned early is dropped, never published half-done.
#include <mutex>

#include "data/dataset_node.h"

namespace dist::data::detail {
namespace {

struct CacheStore {
  std::mutex mu;
  std::shared_ptr<const std::vector<Element>> elements;  // set once a pass completes
};

class ReplayIterator : public IteratorNode {
 public:
  explicit ReplayIterator(std::shared_ptr<const std::vector<Element>> elements)
      : elements_(std::move(elements)) {}
  std::optional<Element> next() override {
    if (index_ >= elements_->size()) return std::nullopt;
    return (*elements_)[index_++];
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = std::min<int64_t>(n, static_cast<int64_t>(elements_->size() - index_));
    index_ += static_cast<size_t>(skipped);
    return skipped;
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
  size_t index_ = 0;
};

class FillingIterator : public IteratorNode {
 public:
  FillingIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<CacheStore> store)
      : input_(std::move(input)), store_(std::move(store)) {}
  std::optional<Element> next() override {
    auto element = input_->next();
    if (!element) {
      if (!published_) {
        published_ = true;
        std::lock_guard<std::mutex> lock(store_->mu);
        if (!store_->elements)
          store_->elements = std::make_shared<const std::vector<Element>>(std::move(seen_));
      }
      return std::nullopt;
    }
    seen_.push_back(*element);
    return element;
  }

 private:
  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<CacheStore> store_;
  std::vector<Element> seen_;
  bool published_ = false;
};

class CacheNode : public Stage<CacheNode> {
 public:
  explicit CacheNode(NodePtr input)
      : Stage(std::move(input)), store_(std::make_shared<CacheStore>()) {}
  std::unique_ptr<IteratorNode> make_iterator(int64_t epoch) const override {
    {
      std::lock_guard<std::mutex> lock(store_->mu);
      if (store_->elements) return std::make_unique<ReplayIterator>(store_->elements);
    }
    // Until a pass completes, every epoch reads the input at epoch 0: the cached content is
    // the first pass, whichever epoch finishes it.
    return std::make_unique<FillingIterator>(input_->make_iterator(0), store_);
  }
  std::string call() const override { return "cache()"; }

 private:
  // A rewritten input (sharded files) reads other data: it gets a cache of its own.
  NodePtr over(NodePtr input) const override {
    return std::make_shared<CacheNode>(std::move(input));
  }
  std::shared_ptr<CacheStore> store_;
};

}  // namespace

NodePtr make_cache_node(NodePtr input) { return std::make_shared<CacheNode>(std::move(input)); }

}  // namespace dist::data::detail
