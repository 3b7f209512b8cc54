// from_generator(): a source whose elements a user function makes, one generator per epoch.
#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

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

}  // namespace

NodePtr make_generator_node(std::function<Generator(int64_t)> make, int64_t cardinality) {
  return std::make_shared<GeneratorNode>(std::move(make), cardinality);
}

}  // namespace dist::data::detail
