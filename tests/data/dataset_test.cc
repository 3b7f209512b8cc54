#include "dist/data/dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "data/dataset_testing.h"
#include "dist/core/error.h"

namespace dist::data {
namespace {

using testing::range;
using testing::values_of;

std::vector<int64_t> iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

TEST(DatasetTest, FromTensorSlicesYieldsRowsInOrder) {
  auto x = torch::arange(6).reshape({3, 2});
  auto y = torch::tensor({10, 11, 12});
  auto it = Dataset::from_tensor_slices({x, y}).iterator();
  for (int64_t i = 0; i < 3; ++i) {
    auto e = it.next();
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 2u);
    EXPECT_TRUE(torch::equal((*e)[0], x[i]));
    EXPECT_EQ((*e)[1].item<int64_t>(), 10 + i);
  }
  EXPECT_FALSE(it.next());
}

TEST(DatasetTest, FromTensorSlicesRejectsMismatchedRows) {
  try {
    Dataset::from_tensor_slices({torch::zeros({3}), torch::zeros({4})});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("4 rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Dataset::from_tensor_slices({torch::scalar_tensor(1)}), InvalidArgument);
  EXPECT_THROW(Dataset::from_tensor_slices({}), InvalidArgument);
}

TEST(DatasetTest, BatchWithAndWithoutRemainder) {
  auto keep = range(10).batch(4);
  EXPECT_EQ(keep.cardinality(), 3);
  std::vector<int64_t> sizes;
  for (const auto& b : keep.iterator()) sizes.push_back(b[0].size(0));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(values_of(keep.iterator()), iota(0, 10));

  auto drop = range(10).batch(4, /*drop_remainder=*/true);
  EXPECT_EQ(drop.cardinality(), 2);
  EXPECT_EQ(values_of(drop.iterator()), iota(0, 8));
  EXPECT_THROW(range(3).batch(0), InvalidArgument);
}

TEST(DatasetTest, BatchRejectsRaggedElements) {
  auto ragged =
      range(2).map([](Element e) { return Element{torch::zeros({e[0].item<int64_t>() + 1})}; });
  EXPECT_THROW(ragged.batch(2).iterator().next(), InvalidArgument);
}

TEST(DatasetTest, ShuffleIsAPermutationDeterministicPerSeedAndEpoch) {
  auto ds = range(100).shuffle(100, /*seed=*/7);
  auto a0 = values_of(ds.iterator(0));
  auto b0 = values_of(range(100).shuffle(100, 7).iterator(0));
  auto a1 = values_of(ds.iterator(1));
  auto other_seed = values_of(range(100).shuffle(100, 8).iterator(0));
  EXPECT_EQ(a0, b0);            // same seed and epoch: same order
  EXPECT_NE(a0, a1);            // next epoch: reshuffled
  EXPECT_NE(a0, other_seed);    // other seed: other order
  EXPECT_NE(a0, iota(0, 100));  // actually shuffled
  auto sorted = a0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(0, 100));  // a permutation

  auto fixed = range(100).shuffle(100, 7, /*reshuffle_each_iteration=*/false);
  EXPECT_EQ(values_of(fixed.iterator(0)), values_of(fixed.iterator(3)));
}

TEST(DatasetTest, SmallShuffleBufferOnlyMovesElementsLocally) {
  // With a buffer of 3, element i cannot come out before position i - 2.
  auto out = values_of(range(50).shuffle(3, 1).iterator());
  auto sorted = out;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(0, 50));
  for (size_t pos = 0; pos < out.size(); ++pos) EXPECT_LE(out[pos], static_cast<int64_t>(pos) + 2);
}

TEST(DatasetTest, PipelineOrderMatters) {
  // batch then take counts batches; take then batch counts elements.
  EXPECT_EQ(values_of(range(10).batch(3).take(2).iterator()), iota(0, 6));
  EXPECT_EQ(values_of(range(10).take(2).batch(3).iterator()), iota(0, 2));
  EXPECT_EQ(values_of(range(10).skip(7).iterator()), iota(7, 10));
  EXPECT_EQ(values_of(range(10).batch(4).skip(2).iterator()), iota(8, 10));
  EXPECT_EQ(range(10).batch(4).skip(2).cardinality(), 1);
  EXPECT_EQ(values_of(range(5).map([](Element e) { return Element{e[0] * 10}; }).iterator()),
            (std::vector<int64_t>{0, 10, 20, 30, 40}));
}

TEST(DatasetTest, RepeatCountsAndReshufflesEachRepetition) {
  EXPECT_EQ(values_of(range(3).repeat(2).iterator()), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(range(3).repeat(2).cardinality(), 6);
  EXPECT_EQ(range(3).repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(values_of(range(3).repeat().take(7).iterator()),
            (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(values_of(range(3).repeat(0).iterator()), std::vector<int64_t>{});
  EXPECT_EQ(values_of(range(0).repeat().iterator()), std::vector<int64_t>{});  // ends

  auto shuffled = range(20).shuffle(20, 3);
  auto repeated = values_of(shuffled.repeat(2).iterator(0));
  auto epoch0 = values_of(shuffled.iterator(0));
  auto epoch1 = values_of(shuffled.iterator(1));
  epoch0.insert(epoch0.end(), epoch1.begin(), epoch1.end());
  EXPECT_EQ(repeated, epoch0);
}

TEST(DatasetTest, ZipConcatenatesComponentsAndStopsAtShortest) {
  auto zipped =
      Dataset::zip({range(5), range(3).map([](Element e) { return Element{e[0] + 100}; })});
  EXPECT_EQ(zipped.cardinality(), 3);
  int64_t i = 0;
  for (const auto& e : zipped.iterator()) {
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].item<int64_t>(), i);
    EXPECT_EQ(e[1].item<int64_t>(), 100 + i);
    ++i;
  }
  EXPECT_EQ(i, 3);
}

TEST(DatasetTest, PrefetchProducesTheSameSequence) {
  auto base = range(200).shuffle(50, 11).batch(7);
  for (int64_t epoch = 0; epoch < 3; ++epoch)
    EXPECT_EQ(values_of(base.prefetch(3).iterator(epoch)), values_of(base.iterator(epoch)));
}

TEST(DatasetTest, PrefetchForwardsErrorsAndStopsCleanlyWhenAbandoned) {
  auto failing = range(10).map([](Element e) {
    if (e[0].item<int64_t>() == 5) throw std::runtime_error("element 5 is bad");
    return e;
  });
  auto it = failing.prefetch(2).iterator();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(it.next());
  EXPECT_THROW(it.next(), std::runtime_error);

  // Abandoning an iterator whose producer is blocked on a full queue must not hang.
  auto big = range(100000).prefetch(4).iterator();
  ASSERT_TRUE(big.next());
}

TEST(DatasetTest, CacheReplaysFirstCompletePassOnly) {
  std::atomic<int> calls{0};
  auto counted = range(4).map([&calls](Element e) {
    ++calls;
    return e;
  });
  auto cached = counted.shuffle(4, 5).cache();
  auto partial = cached.iterator(0);
  partial.next();  // abandoned: nothing is cached
  auto first = values_of(cached.iterator(0));
  int after_first = calls.load();
  auto second = values_of(cached.iterator(1));
  EXPECT_EQ(first, second);  // replayed, not reshuffled
  EXPECT_EQ(calls.load(), after_first);
}

TEST(DatasetTest, SaveAndRestorePositionResumesExactly) {
  auto ds = range(100).shuffle(100, 9).batch(8).prefetch(2);
  auto it = ds.iterator(2);
  for (int i = 0; i < 5; ++i) it.next();
  IteratorPosition saved = it.position();
  EXPECT_EQ(saved, (IteratorPosition{2, 5}));
  auto rest = values_of(std::move(it));

  auto restored = ds.iterator_at(saved);
  EXPECT_EQ(restored.position(), saved);
  EXPECT_EQ(values_of(std::move(restored)), rest);

  // Restoring through map and repeat, past the first repetition.
  auto mapped = range(10).shuffle(10, 2).map([](Element e) { return Element{e[0] + 1}; }).repeat(3);
  auto full = values_of(mapped.iterator(1));
  auto resumed = values_of(mapped.iterator_at({1, 13}));
  EXPECT_EQ(resumed, std::vector<int64_t>(full.begin() + 13, full.end()));

  EXPECT_THROW(ds.iterator_at({0, 1000}), InvalidArgument);
  EXPECT_THROW(ds.iterator_at({0, -1}), InvalidArgument);
}

// Each element as {epoch * 1000 + index} as seen by a map_with_context stage.
Dataset contexts_of(const Dataset& ds) {
  return ds.map_with_context([](Element, const ElementContext& c) {
    return Element{torch::tensor(c.epoch * 1000 + c.index)};
  });
}

std::vector<int64_t> plus(int64_t offset, std::vector<int64_t> v) {
  for (auto& x : v) x += offset;
  return v;
}

TEST(DatasetTest, MapWithContextSeesItsEpochAndTheIndexCountedAtTheStage) {
  auto plain = contexts_of(range(5));
  EXPECT_EQ(values_of(plain.iterator(2)), plus(2000, iota(0, 5)));
  EXPECT_EQ(plain.describe(), "from_tensor_slices(5).map_with_context()");
  // Restoring skips elements without calling the map, yet they keep their indices.
  EXPECT_EQ(values_of(plain.iterator_at({2, 3})), plus(2000, iota(3, 5)));
  EXPECT_EQ(values_of(contexts_of(range(5)).batch(2).iterator_at({1, 1})), plus(1000, iota(2, 5)));
  // skip() before the stage: the stage counts from its first element.
  EXPECT_EQ(values_of(contexts_of(range(5).skip(2)).iterator()), iota(0, 3));

  // Under repeat(3), repetition r of epoch e is epoch 3e + r, indices restart.
  std::vector<int64_t> repeated;
  for (int64_t r = 0; r < 3; ++r) {
    auto part = plus((3 + r) * 1000, iota(0, 2));
    repeated.insert(repeated.end(), part.begin(), part.end());
  }
  EXPECT_EQ(values_of(contexts_of(range(2)).repeat(3).iterator(1)), repeated);
  // After repeat, the stage sees the outer epoch and counts across the repetitions.
  EXPECT_EQ(values_of(contexts_of(range(2).repeat(3)).iterator(1)), plus(1000, iota(0, 6)));
  // Below cache(), the stage runs once, at epoch 0; its output is replayed.
  auto cached = contexts_of(range(3)).cache();
  EXPECT_EQ(values_of(cached.iterator(4)), iota(0, 3));
  EXPECT_EQ(values_of(cached.iterator(5)), iota(0, 3));
  // Behind a prefetch thread, the same.
  EXPECT_EQ(values_of(contexts_of(range(4)).prefetch(2).iterator(1)), plus(1000, iota(0, 4)));

  EXPECT_THROW(range(2).map_with_context(nullptr), InvalidArgument);
}

TEST(DatasetTest, ArgumentsAreChecked) {
  EXPECT_THROW(range(3).shuffle(0, 1), InvalidArgument);
  EXPECT_THROW(range(3).prefetch(0), InvalidArgument);
  EXPECT_THROW(range(3).skip(-1), InvalidArgument);
  EXPECT_THROW(range(3).repeat(-2), InvalidArgument);
  EXPECT_THROW(range(3).iterator(-1), InvalidArgument);
}

TEST(DatasetTest, DescribeNamesTheStages) {
  EXPECT_EQ(range(10).shuffle(10, 1).batch(4).describe(),
            "from_tensor_slices(10).shuffle(10).batch(4)");
}

}  // namespace
}  // namespace dist::data
