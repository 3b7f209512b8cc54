#include "dist/data/dataset.h"

#include "data/dataset_node.h"
#include "dist/core/error.h"

namespace dist::data {

Dataset::Dataset(std::shared_ptr<const detail::DatasetNode> node) : node_(std::move(node)) {
  DIST_INTERNAL_ASSERT(node_ != nullptr);
}

Dataset Dataset::from_tensor_slices(Element tensors) {
  return Dataset(detail::make_tensor_slices_node(std::move(tensors)));
}

Dataset Dataset::range(int64_t start, int64_t stop, int64_t step) {
  DIST_CHECK_ARG(step != 0, "Dataset::range(", start, ", ", stop,
                 ", 0): step must not be 0 (it would never reach stop)");
  return Dataset(detail::make_range_node(start, stop, step));
}

Dataset Dataset::zip(std::vector<Dataset> datasets) {
  std::vector<detail::NodePtr> nodes;
  for (const auto& d : datasets) nodes.push_back(d.node_);
  return Dataset(detail::make_zip_node(std::move(nodes)));
}

Dataset Dataset::from_generator(std::function<Generator(int64_t)> make_generator,
                                int64_t cardinality) {
  DIST_CHECK_ARG(static_cast<bool>(make_generator),
                 "Dataset::from_generator needs a function, got an empty one");
  DIST_CHECK_ARG(cardinality >= kUnknownCardinality, "from_generator: cardinality ", cardinality,
                 " is neither a count nor kInfiniteCardinality / kUnknownCardinality");
  return Dataset(detail::make_generator_node(std::move(make_generator), cardinality));
}

namespace {

void check_map_options(const MapOptions& options) {
  DIST_CHECK_ARG(options.num_parallel_calls >= 1 || options.num_parallel_calls == kAutotune,
                 "map: num_parallel_calls must be at least 1 or kAutotune, got ",
                 options.num_parallel_calls);
}

}  // namespace

Dataset Dataset::map(std::function<Element(Element)> fn, const MapOptions& options) const {
  DIST_CHECK_ARG(static_cast<bool>(fn), "Dataset::map needs a function, got an empty one");
  return map_with_context(
      [fn = std::move(fn)](Element e, const ElementContext&) { return fn(std::move(e)); }, options);
}

Dataset Dataset::map_with_context(std::function<Element(Element, const ElementContext&)> fn,
                                  const MapOptions& options) const {
  check_map_options(options);
  if (options.num_parallel_calls == 1) return map_with_context(std::move(fn));
  DIST_CHECK_ARG(static_cast<bool>(fn),
                 "Dataset::map_with_context needs a function, got an empty one");
  return Dataset(detail::make_parallel_map_node(node_, std::move(fn), options));
}

Dataset Dataset::interleave(std::function<Dataset(const Element&)> fn,
                            const InterleaveOptions& options) const {
  DIST_CHECK_ARG(static_cast<bool>(fn), "Dataset::interleave needs a function, got an empty one");
  DIST_CHECK_ARG(options.cycle_length >= 1, "interleave: cycle_length must be at least 1, got ",
                 options.cycle_length);
  DIST_CHECK_ARG(options.block_length >= 1, "interleave: block_length must be at least 1, got ",
                 options.block_length);
  DIST_CHECK_ARG(options.num_parallel_calls >= 1,
                 "interleave: num_parallel_calls must be at least 1, got ",
                 options.num_parallel_calls);
  return Dataset(detail::make_interleave_node(node_, std::move(fn), options));
}

Dataset Dataset::flat_map(std::function<Dataset(const Element&)> fn) const {
  DIST_CHECK_ARG(static_cast<bool>(fn), "Dataset::flat_map needs a function, got an empty one");
  return Dataset(detail::make_flat_map_node(node_, std::move(fn)));
}

Dataset Dataset::filter(std::function<bool(const Element&)> predicate) const {
  DIST_CHECK_ARG(static_cast<bool>(predicate),
                 "Dataset::filter needs a predicate, got an empty function");
  return Dataset(detail::make_filter_node(node_, std::move(predicate)));
}

Dataset Dataset::concatenate(const Dataset& other) const {
  return Dataset(detail::make_concatenate_node(node_, other.node_));
}

Dataset Dataset::unbatch() const { return Dataset(detail::make_unbatch_node(node_)); }

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  DIST_CHECK_ARG(num_shards >= 1, "shard: num_shards must be at least 1, got ", num_shards);
  DIST_CHECK_ARG(index >= 0 && index < num_shards, "shard: index ", index, " is out of range for ",
                 num_shards, " shards (0 to ", num_shards - 1, ")");
  return Dataset(detail::make_shard_node(node_, num_shards, index));
}

Dataset Dataset::ignore_errors(std::shared_ptr<IgnoredErrors> log) const {
  return Dataset(detail::make_ignore_errors_node(node_, std::move(log)));
}

Dataset Dataset::map(std::function<Element(Element)> fn) const {
  DIST_CHECK_ARG(static_cast<bool>(fn), "Dataset::map needs a function, got an empty one");
  return Dataset(detail::make_map_node(node_, std::move(fn)));
}

Dataset Dataset::map_with_context(std::function<Element(Element, const ElementContext&)> fn) const {
  DIST_CHECK_ARG(static_cast<bool>(fn),
                 "Dataset::map_with_context needs a function, got an empty one");
  return Dataset(detail::make_map_with_context_node(node_, std::move(fn)));
}

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  DIST_CHECK_ARG(buffer_size >= 1, "shuffle buffer size must be at least 1, got ", buffer_size);
  return Dataset(detail::make_shuffle_node(node_, buffer_size, seed, reshuffle_each_iteration));
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  DIST_CHECK_ARG(batch_size >= 1, "batch size must be at least 1, got ", batch_size);
  return Dataset(detail::make_batch_node(node_, batch_size, drop_remainder));
}

Dataset Dataset::padded_batch(int64_t batch_size, std::vector<std::vector<int64_t>> padded_shapes,
                              std::vector<at::Scalar> padding_values, bool drop_remainder) const {
  DIST_CHECK_ARG(batch_size >= 1, "padded_batch: batch size must be at least 1, got ", batch_size);
  return Dataset(detail::make_padded_batch_node(node_, batch_size, std::move(padded_shapes),
                                                std::move(padding_values), drop_remainder));
}

Dataset Dataset::bucket_by_sequence_length(std::function<int64_t(const Element&)> length,
                                           std::vector<int64_t> bucket_boundaries,
                                           std::vector<int64_t> bucket_batch_sizes,
                                           const BucketOptions& options) const {
  DIST_CHECK_ARG(static_cast<bool>(length),
                 "bucket_by_sequence_length needs an element_length_func, got an empty function");
  return Dataset(detail::make_bucket_node(node_, std::move(length), std::move(bucket_boundaries),
                                          std::move(bucket_batch_sizes), options));
}

Dataset Dataset::prefetch(int64_t buffer_size) const {
  DIST_CHECK_ARG(buffer_size >= 1, "prefetch buffer size must be at least 1, got ", buffer_size);
  return Dataset(detail::make_prefetch_node(node_, buffer_size));
}

Dataset Dataset::cache() const { return Dataset(detail::make_cache_node(node_)); }

Dataset Dataset::take(int64_t count) const {
  DIST_CHECK_ARG(count >= -1, "take count must be -1 (all) or at least 0, got ", count);
  return Dataset(detail::make_take_node(node_, count));
}

Dataset Dataset::skip(int64_t count) const {
  DIST_CHECK_ARG(count >= 0, "skip count must be at least 0, got ", count);
  return Dataset(detail::make_skip_node(node_, count));
}

Dataset Dataset::repeat(int64_t count) const {
  DIST_CHECK_ARG(count >= -1, "repeat count must be -1 (forever) or at least 0, got ", count);
  return Dataset(detail::make_repeat_node(node_, count));
}

Dataset Dataset::with_options(const DatasetOptions& options) const {
  return Dataset(detail::make_options_node(node_, options));
}

DatasetOptions Dataset::options() const { return detail::options_of(node_); }

int64_t Dataset::cardinality() const { return node_->cardinality(); }

Iterator Dataset::iterator(int64_t epoch) const {
  DIST_CHECK_ARG(epoch >= 0, "epoch must be at least 0, got ", epoch);
  return Iterator(node_->make_iterator(epoch), epoch);
}

Iterator Dataset::iterator_at(const IteratorPosition& position) const {
  DIST_CHECK_ARG(position.elements >= 0, "iterator position has a negative element count (",
                 position.elements, "): the saved position is corrupt");
  Iterator it = iterator(position.epoch);
  int64_t skipped = it.skip(position.elements);
  DIST_CHECK_ARG(skipped == position.elements, "cannot restore iterator position (epoch ",
                 position.epoch, ", element ", position.elements, "): epoch ", position.epoch,
                 " of ", describe(), " has only ", skipped,
                 " elements; was the position saved with a different pipeline?");
  return it;
}

std::string Dataset::describe() const { return node_->describe(); }

Iterator::Iterator(std::unique_ptr<detail::IteratorNode> node, int64_t epoch)
    : node_(std::move(node)), epoch_(epoch) {}
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&&) noexcept = default;
Iterator::~Iterator() = default;

std::optional<Element> Iterator::next() {
  auto element = node_->next();
  if (element) ++consumed_;
  return element;
}

int64_t Iterator::skip(int64_t n) {
  int64_t skipped = n > 0 ? node_->skip(n) : 0;
  consumed_ += skipped;
  return skipped;
}

Iterator::Cursor::Cursor(Iterator* owner) : owner_(owner) {
  if (owner_ != nullptr) ++*this;
}

Iterator::Cursor& Iterator::Cursor::operator++() {
  current_ = owner_->next();
  if (!current_) owner_ = nullptr;
  return *this;
}

}  // namespace dist::data
