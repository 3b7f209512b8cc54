// bucket_by_sequence_length: routes each element by its length to one of a few padded_batch
// queues (padding.h), so that a batch holds sequences of similar length and little padding.
// The routing is a function of the input's order alone, which is what makes restoring a
// position exact (the skipped batches are grouped again, only not padded).
#include <algorithm>
#include <functional>

#include "data/dataset_node.h"
#include "data/stages/padding.h"
#include "dist/core/error.h"

namespace dist::data::detail {
namespace {

struct BucketSpec {
  std::function<int64_t(const Element&)> length;
  std::vector<int64_t> boundaries;
  std::vector<int64_t> batch_sizes;
  bool pad_to_boundary = false;
  bool drop_remainder = false;
  PadSpec pad;
};

class BucketIterator : public IteratorNode {
 public:
  BucketIterator(std::unique_ptr<IteratorNode> input, std::shared_ptr<const BucketSpec> spec)
      : input_(std::move(input)),
        spec_(std::move(spec)),
        buckets_(spec_->batch_sizes.size()),
        counted_(0) {}

  std::optional<Element> next() override {
    auto group = next_group();
    if (!group) return std::nullopt;
    const int64_t unknown =
        spec_->pad_to_boundary ? spec_->boundaries[static_cast<size_t>(*group)] - 1 : -1;
    Element batch = pad_elements(buckets_[static_cast<size_t>(*group)], spec_->pad, unknown);
    buckets_[static_cast<size_t>(*group)].clear();
    return batch;
  }
  int64_t skip(int64_t n) override {
    int64_t skipped = 0;
    for (; skipped < n; ++skipped) {
      auto group = next_group();
      if (!group) break;
      buckets_[static_cast<size_t>(*group)].clear();
    }
    return skipped;
  }

 private:
  // Fills buckets until one is ready and returns its index (its elements stay in buckets_ for
  // the caller to pad or drop), or nullopt at the end.
  std::optional<int64_t> next_group() {
    while (!input_done_) {
      auto element = input_->next();
      if (!element) {
        input_done_ = true;
        break;
      }
      const int64_t bucket = bucket_of(*element);
      auto& queue = buckets_[static_cast<size_t>(bucket)];
      queue.push_back(std::move(*element));
      ++counted_;
      if (static_cast<int64_t>(queue.size()) == spec_->batch_sizes[static_cast<size_t>(bucket)])
        return bucket;
    }
    // The partial buckets, in bucket order.
    for (; flush_ < buckets_.size(); ++flush_) {
      if (buckets_[flush_].empty() || spec_->drop_remainder) continue;
      return static_cast<int64_t>(flush_++);
    }
    return std::nullopt;
  }

  int64_t bucket_of(const Element& element) const {
    const int64_t length = spec_->length(element);
    DIST_CHECK_ARG(length >= 0, "bucket_by_sequence_length: element_length_func gave ", length,
                   " for input element ", counted_, " ", element.describe(),
                   "; a length must be 0 or more");
    const auto& b = spec_->boundaries;
    const auto bucket =
        static_cast<int64_t>(std::upper_bound(b.begin(), b.end(), length) - b.begin());
    DIST_CHECK_ARG(!spec_->pad_to_boundary || bucket < static_cast<int64_t>(b.size()),
                   "bucket_by_sequence_length: input element ", counted_, " has length ", length,
                   ", in the last bucket (from ", b.empty() ? 0 : b.back(),
                   " up), which has no boundary to pad to under pad_to_bucket_boundary; add a "
                   "boundary above the longest element or filter the longer ones");
    return bucket;
  }

  std::unique_ptr<IteratorNode> input_;
  std::shared_ptr<const BucketSpec> spec_;
  std::vector<std::vector<Element>> buckets_;
  int64_t counted_;  // input elements read, for errors
  bool input_done_ = false;
  size_t flush_ = 0;
};

class BucketNode
    : public IteratingStage<BucketNode, BucketIterator, std::shared_ptr<const BucketSpec>> {
 public:
  using IteratingStage::IteratingStage;
  int64_t cardinality() const override {
    const int64_t c = input_->cardinality();
    return c == 0 || c == kInfiniteCardinality ? c : kUnknownCardinality;
  }
  std::string call() const override {
    return "bucket_by_sequence_length(boundaries=" + shape_string(setting_->boundaries) +
           ", batch_sizes=" + shape_string(setting_->batch_sizes) + describe_spec(setting_->pad) +
           (setting_->pad_to_boundary ? ", pad_to_bucket_boundary" : "") +
           (setting_->drop_remainder ? ", drop_remainder" : "") + ")";
  }
};

}  // namespace

NodePtr make_bucket_node(NodePtr input, std::function<int64_t(const Element&)> length,
                         std::vector<int64_t> boundaries, std::vector<int64_t> batch_sizes,
                         const BucketOptions& options) {
  DIST_CHECK_ARG(batch_sizes.size() == boundaries.size() + 1,
                 "bucket_by_sequence_length: bucket_batch_sizes has ", batch_sizes.size(),
                 " entries for ", boundaries.size(), " bucket_boundaries; give ",
                 boundaries.size() + 1,
                 " (one per bucket: below the first boundary, between "
                 "each two, and from the last up)");
  for (size_t i = 0; i < boundaries.size(); ++i)
    DIST_CHECK_ARG(boundaries[i] >= 1 && (i == 0 || boundaries[i] > boundaries[i - 1]),
                   "bucket_by_sequence_length: bucket_boundaries ", shape_string(boundaries),
                   " must increase strictly from 1 up (entry ", i, " is ", boundaries[i], ")");
  for (size_t i = 0; i < batch_sizes.size(); ++i)
    DIST_CHECK_ARG(batch_sizes[i] >= 1, "bucket_by_sequence_length: bucket_batch_sizes[", i,
                   "] is ", batch_sizes[i], "; each must be at least 1");
  auto spec = std::make_shared<BucketSpec>();
  spec->length = std::move(length);
  spec->boundaries = std::move(boundaries);
  spec->batch_sizes = std::move(batch_sizes);
  spec->pad_to_boundary = options.pad_to_bucket_boundary;
  spec->drop_remainder = options.drop_remainder;
  spec->pad.shapes = options.padded_shapes;
  spec->pad.values = options.padding_values;
  spec->pad.stage = "bucket_by_sequence_length";
  check_pad_spec(spec->pad);
  return std::make_shared<BucketNode>(std::move(input), std::move(spec));
}

}  // namespace dist::data::detail
