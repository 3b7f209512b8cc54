// The tf.data-style stages of issue 69: padded_batch, bucket_by_sequence_length, filter,
// flat_map, range, concatenate, unbatch, and elements with named components.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "data/dataset_testing.h"
#include "data/sharding/file_shard.h"
#include "dist/core/error.h"
#include "dist/data/dataset.h"
#include "dist/data/example.h"

namespace dist::data {
namespace {

using testing::values_of;

std::vector<Element> all_of(Iterator it) {
  std::vector<Element> out;
  while (auto e = it.next()) out.push_back(std::move(*e));
  return out;
}

void expect_same(const Element& a, const Element& b, const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  EXPECT_EQ(a.names(), b.names()) << where;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].sizes(), b[k].sizes()) << where << " component " << k;
    EXPECT_EQ(a[k].scalar_type(), b[k].scalar_type()) << where << " component " << k;
    EXPECT_TRUE(torch::equal(a[k], b[k])) << where << " component " << k;
  }
}

// Restoring at every position of the epoch gives exactly the rest of an uninterrupted pass.
void expect_exact_restore(const Dataset& ds, int64_t epoch = 0) {
  const std::vector<Element> whole = all_of(ds.iterator(epoch));
  for (int64_t p = 0; p <= static_cast<int64_t>(whole.size()); ++p) {
    Iterator it = ds.iterator_at({epoch, p});
    EXPECT_EQ(it.position(), (IteratorPosition{epoch, p}));
    const std::vector<Element> rest = all_of(std::move(it));
    ASSERT_EQ(rest.size(), whole.size() - static_cast<size_t>(p)) << ds.describe() << " at " << p;
    for (size_t i = 0; i < rest.size(); ++i)
      expect_same(rest[i], whole[static_cast<size_t>(p) + i],
                  ds.describe() + " restored at " + std::to_string(p));
  }
  EXPECT_THROW(ds.iterator_at({epoch, static_cast<int64_t>(whole.size()) + 1}), InvalidArgument);
}

// Sequences 0..n-1 of lengths `lengths`: element i is arange(len_i) + 100 i.
Dataset sequences(const std::vector<int64_t>& lengths) {
  return Dataset::from_generator(
      [lengths](int64_t) {
        auto i = std::make_shared<size_t>(0);
        return Generator([lengths, i]() -> std::optional<Element> {
          if (*i >= lengths.size()) return std::nullopt;
          const auto n = static_cast<int64_t>(*i);
          auto seq = torch::arange(lengths[(*i)++]) + 100 * n;
          return Element{seq, torch::scalar_tensor(n, torch::kLong)};
        });
      },
      static_cast<int64_t>(lengths.size()));
}

int64_t length_of(const Element& e) { return e[0].size(0); }

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- padded_batch ----

TEST(DatasetApiTest, PaddedBatchPadsToTheLongestWithZeros) {
  auto ds = sequences({2, 4, 1, 3, 5}).padded_batch(2);
  EXPECT_EQ(ds.cardinality(), 3);
  EXPECT_EQ(ds.describe(), "from_generator().padded_batch(2)");
  auto batches = all_of(ds.iterator());
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_TRUE(torch::equal(batches[0][0], torch::tensor({{0, 1, 0, 0}, {100, 101, 102, 103}})));
  EXPECT_TRUE(torch::equal(batches[0][1], torch::tensor({0, 1})));
  EXPECT_TRUE(torch::equal(batches[1][0], torch::tensor({{200, 0, 0}, {300, 301, 302}})));
  EXPECT_TRUE(torch::equal(batches[2][0], torch::tensor({{400, 401, 402, 403, 404}})));
  expect_exact_restore(ds);
}

TEST(DatasetApiTest, PaddedBatchFixedShapesAndValues) {
  auto ds = sequences({2, 3, 1}).padded_batch(3, {{6}, {}}, {-1, 0}, /*drop_remainder=*/false);
  EXPECT_EQ(ds.describe(),
            "from_generator().padded_batch(3, padded_shapes=[[6], []], padding_values=[-1, 0])");
  auto b = all_of(ds.iterator());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_TRUE(torch::equal(b[0][0], torch::tensor({{0, 1, -1, -1, -1, -1},
                                                   {100, 101, 102, -1, -1, -1},
                                                   {200, -1, -1, -1, -1, -1}})));
  EXPECT_EQ(b[0][0].scalar_type(), torch::kLong);
}

TEST(DatasetApiTest, PaddedBatchTwoDimensionsAndFloats) {
  // Images of several sizes padded in both dimensions, -1 = the longest, a float padding value.
  auto images = Dataset::from_generator(
      [](int64_t) {
        auto i = std::make_shared<int64_t>(0);
        return Generator([i]() -> std::optional<Element> {
          if (*i == 3) return std::nullopt;
          ++*i;
          return Element{torch::ones({*i, 4 - *i})};
        });
      },
      3);
  auto b = all_of(images.padded_batch(3, {{-1, -1}}, {0.5}).iterator());
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0][0].sizes(), (torch::IntArrayRef{3, 3, 3}));
  EXPECT_FLOAT_EQ(b[0][0].sum().item<float>(), 3 + 4 + 3 + 0.5f * (27 - 10));
  EXPECT_FLOAT_EQ(b[0][0][2][2][0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(b[0][0][0][1][0].item<float>(), 0.5f);
}

// Each element lands in its corner whatever its rank, layout (a transposed view) or dtype.
TEST(DatasetApiTest, PaddedBatchCopiesEveryLayout) {
  auto a = torch::arange(24, torch::kDouble).reshape({2, 3, 4});
  auto b = torch::arange(6, torch::kDouble).reshape({3, 2}).t().unsqueeze(0);  // [1, 2, 3] view
  auto empty = torch::zeros({0, 1, 1}, torch::kDouble);
  std::vector<Element> in{{a}, {b}, {empty}};
  auto ds = Dataset::from_generator(
      [in](int64_t) {
        auto i = std::make_shared<size_t>(0);
        return Generator([in, i]() -> std::optional<Element> {
          if (*i == in.size()) return std::nullopt;
          return in[(*i)++];
        });
      },
      3);
  auto out = all_of(ds.padded_batch(3, {}, {-1.0}).iterator());
  ASSERT_EQ(out.size(), 1u);
  const at::Tensor& t = out[0][0];
  EXPECT_EQ(t.sizes(), (torch::IntArrayRef{3, 2, 3, 4}));
  EXPECT_TRUE(torch::equal(t[0], a));
  EXPECT_TRUE(torch::equal(t[1].narrow(0, 0, 1).narrow(1, 0, 2).narrow(2, 0, 3), b));
  EXPECT_EQ(t[1].sum().item<double>(), 15.0 - (24 - 6));
  EXPECT_TRUE(torch::equal(t[2], torch::full({2, 3, 4}, -1.0, torch::kDouble)));
  auto flags = all_of(Dataset::from_tensor_slices({torch::tensor({true, false})})
                          .map([](Element e) { return Element{e[0].reshape({1})}; })
                          .padded_batch(2, {{3}}, {true})
                          .iterator());
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_TRUE(torch::equal(flags[0][0], torch::tensor({{true, true, true}, {false, true, true}})));
}

TEST(DatasetApiTest, PaddedBatchDropRemainderAndCardinality) {
  auto ds = sequences({1, 2, 3, 4, 5}).padded_batch(2, {}, {}, /*drop_remainder=*/true);
  EXPECT_EQ(ds.cardinality(), 2);
  EXPECT_EQ(all_of(ds.iterator()).size(), 2u);
  EXPECT_EQ(ds.describe(), "from_generator().padded_batch(2, drop_remainder)");
  expect_exact_restore(ds);
  EXPECT_EQ(sequences({1, 2}).repeat().padded_batch(4).cardinality(), kInfiniteCardinality);
}

TEST(DatasetApiTest, PaddedBatchErrorsNameWhatIsWrong) {
  EXPECT_TRUE(has(error_of([] { sequences({1}).padded_batch(0); }), "at least 1"));
  EXPECT_TRUE(has(error_of([] { sequences({1}).padded_batch(2, {{-2}, {}}); }), "-1"));
  // A padded shape smaller than an element: the element, component and dimension are named.
  const std::string small = error_of([] {
    all_of(sequences({2, 5}).padded_batch(2, {{4}, {}}).iterator());
  });
  EXPECT_TRUE(has(small, "component 0 of element 1")) << small;
  EXPECT_TRUE(has(small, "dimension 0 (5 > 4)")) << small;
  // Wrong rank, wrong count of shapes or values.
  EXPECT_TRUE(has(error_of([] {
                    all_of(sequences({2}).padded_batch(1, {{4, 4}, {}}).iterator());
                  }),
                  "rank"));
  EXPECT_TRUE(has(error_of([] { all_of(sequences({2}).padded_batch(1, {{4}}).iterator()); }),
                  "padded_shapes has 1 entries but the elements have 2 components"));
  EXPECT_TRUE(has(error_of([] { all_of(sequences({2}).padded_batch(1, {}, {1}).iterator()); }),
                  "padding_values has 1 entries"));
}

TEST(DatasetApiTest, PaddedBatchKeepsNames) {
  auto ds = Dataset::from_tensor_slices(
                {{"tokens", torch::arange(6).reshape({3, 2})}, {"label", torch::arange(3)}})
                .padded_batch(2);
  auto b = all_of(ds.iterator());
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].names(), (std::vector<std::string>{"tokens", "label"}));
  EXPECT_TRUE(torch::equal(b[1]["tokens"], torch::tensor({{4, 5}})));
}

// Sharding by file (kFile) divides a padded global batch among the workers as a plain one.
TEST(DatasetApiTest, PaddedBatchDividesAmongWorkers) {
  auto global = sequences({1, 2, 3, 4}).padded_batch(4, {{-1}, {}}, {-1, 0}).prefetch(1);
  auto divided = detail::divide_global_batch(global, 2);
  EXPECT_EQ(divided.describe(),
            "from_generator().padded_batch(2, padded_shapes=[[-1], []], padding_values=[-1, 0])"
            ".prefetch(1)");
  auto b = all_of(divided.iterator());
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(torch::equal(b[0][0], torch::tensor({{0, -1}, {100, 101}})));
  EXPECT_TRUE(has(error_of([] { detail::divide_global_batch(sequences({1}).padded_batch(3), 2); }),
                  "does not divide among the 2 workers"));
  EXPECT_TRUE(has(error_of([] {
                    detail::divide_global_batch(
                        sequences({1}).bucket_by_sequence_length(length_of, {2}, {2, 2}), 2);
                  }),
                  "AutoShardPolicy::kData"));
}

// ---- bucket_by_sequence_length ----

TEST(DatasetApiTest, BucketsBySequenceLength) {
  // Boundaries 3, 5: bucket 0 holds lengths 0-2 (batches of 2), bucket 1 lengths 3-4
  // (batches of 3), bucket 2 lengths 5 up (batches of 2).
  auto ds = sequences({1, 3, 6, 2, 4, 7, 3, 1, 5})
                .bucket_by_sequence_length(length_of, {3, 5}, {2, 3, 2});
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.describe(),
            "from_generator().bucket_by_sequence_length(boundaries=[3, 5], batch_sizes=[2, 3, 2])");
  auto b = all_of(ds.iterator());
  // Full buckets as they fill: {0, 3} (lengths 1, 2), {2, 5} (6, 7), {1, 4, 6} (3, 4, 3); then
  // the partial ones in bucket order: {7} (1), {8} (5).
  ASSERT_EQ(b.size(), 5u);
  EXPECT_TRUE(torch::equal(b[0][1], torch::tensor({0, 3})));
  EXPECT_EQ(b[0][0].sizes(), (torch::IntArrayRef{2, 2}));
  EXPECT_TRUE(torch::equal(b[1][1], torch::tensor({2, 5})));
  EXPECT_EQ(b[1][0].sizes(), (torch::IntArrayRef{2, 7}));
  EXPECT_TRUE(torch::equal(b[2][1], torch::tensor({1, 4, 6})));
  EXPECT_TRUE(torch::equal(
      b[2][0], torch::tensor({{100, 101, 102, 0}, {400, 401, 402, 403}, {600, 601, 602, 0}})));
  EXPECT_TRUE(torch::equal(b[3][1], torch::tensor({7})));
  EXPECT_TRUE(torch::equal(b[4][1], torch::tensor({8})));
  expect_exact_restore(ds);

  BucketOptions drop;
  drop.drop_remainder = true;
  auto dropped = sequences({1, 3, 6, 2, 4, 7, 3, 1, 5})
                     .bucket_by_sequence_length(length_of, {3, 5}, {2, 3, 2}, drop);
  EXPECT_EQ(all_of(dropped.iterator()).size(), 3u);
  expect_exact_restore(dropped);
}

TEST(DatasetApiTest, BucketPadsToBoundaryAndWithValues) {
  BucketOptions options;
  options.pad_to_bucket_boundary = true;
  options.padding_values = {-1, 0};
  auto ds =
      sequences({1, 4, 2, 3}).bucket_by_sequence_length(length_of, {3, 6}, {2, 2, 2}, options);
  auto b = all_of(ds.iterator());
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(torch::equal(b[0][0], torch::tensor({{0, -1}, {200, 201}})));  // 3 - 1 = 2
  EXPECT_EQ(b[1][0].sizes(), (torch::IntArrayRef{2, 5}));                    // 6 - 1 = 5
  // An element of the last, unbounded bucket cannot be padded to a boundary.
  const std::string err = error_of([&] {
    all_of(sequences({1, 7})
               .bucket_by_sequence_length(length_of, {3, 6}, {2, 2, 2}, options)
               .iterator());
  });
  EXPECT_TRUE(has(err, "input element 1 has length 7")) << err;
}

TEST(DatasetApiTest, BucketRejectsBadArguments) {
  auto ds = sequences({1});
  EXPECT_TRUE(has(error_of([&] { ds.bucket_by_sequence_length(length_of, {3}, {2}); }), "give 2"));
  EXPECT_TRUE(has(error_of([&] {
                    ds.bucket_by_sequence_length(length_of, {3, 3}, {1, 1, 1});
                  }),
                  "increase strictly"));
  EXPECT_TRUE(has(error_of([&] {
                    ds.bucket_by_sequence_length(length_of, {0}, {1, 1});
                  }),
                  "increase strictly"));
  EXPECT_TRUE(has(error_of([&] {
                    ds.bucket_by_sequence_length(length_of, {3}, {1, 0});
                  }),
                  "bucket_batch_sizes[1] is 0"));
  EXPECT_TRUE(has(error_of([&] {
                    ds.bucket_by_sequence_length(nullptr, {3}, {1, 1});
                  }),
                  "element_length_func"));
  EXPECT_TRUE(has(error_of([&] {
                    all_of(
                        ds.bucket_by_sequence_length([](const Element&) { return -1; }, {3}, {1, 1})
                            .iterator());
                  }),
                  "gave -1"));
}

// ---- range, filter, flat_map, concatenate, unbatch ----

TEST(DatasetApiTest, Range) {
  EXPECT_EQ(values_of(Dataset::range(5).iterator()), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values_of(Dataset::range(2, 11, 3).iterator()), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(values_of(Dataset::range(5, 0, -2).iterator()), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(Dataset::range(2, 11, 3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(5, 0, -2).cardinality(), 3);
  EXPECT_EQ(Dataset::range(5, 5).cardinality(), 0);
  EXPECT_EQ(Dataset::range(5, 0).cardinality(), 0);
  EXPECT_EQ(Dataset::range(2, 11, 3).describe(), "range(2, 11, 3)");
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Dataset::range(-big, big, big).cardinality(), 2);
  EXPECT_EQ(Dataset::range(big, -big, -big).cardinality(), 2);
  auto e = Dataset::range(1).iterator().next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)[0].dim(), 0);
  EXPECT_EQ((*e)[0].scalar_type(), torch::kLong);
  EXPECT_TRUE(has(error_of([] { Dataset::range(0, 5, 0); }), "step must not be 0"));
  expect_exact_restore(Dataset::range(-3, 10, 4));
}

TEST(DatasetApiTest, Filter) {
  auto even =
      Dataset::range(10).filter([](const Element& e) { return e[0].item<int64_t>() % 2 == 0; });
  EXPECT_EQ(values_of(even.iterator()), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(even.cardinality(), kUnknownCardinality);
  EXPECT_EQ(Dataset::range(0).filter([](const Element&) { return true; }).cardinality(), 0);
  EXPECT_EQ(even.describe(), "range(0, 10, 1).filter()");
  expect_exact_restore(even);
  // After a shuffle: restored at the same epoch, the same elements pass.
  expect_exact_restore(Dataset::range(20).shuffle(20, 7).filter(
                           [](const Element& e) { return e[0].item<int64_t>() % 3 != 0; }),
                       3);
  EXPECT_THROW(Dataset::range(3).filter(nullptr), InvalidArgument);
}

TEST(DatasetApiTest, FlatMap) {
  // Element n gives n copies of n.
  auto ds = Dataset::range(4).flat_map([](const Element& e) {
    const int64_t n = e[0].item<int64_t>();
    return Dataset::from_tensor_slices({torch::full({n}, n, torch::kLong)});
  });
  EXPECT_EQ(values_of(ds.iterator()), (std::vector<int64_t>{1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.describe(), "range(0, 4, 1).flat_map()");
  expect_exact_restore(ds);
  // Inner datasets run at the stage's epoch: a shuffled one reshuffles per epoch, restored alike.
  auto shuffled = Dataset::range(3).flat_map([](const Element& e) {
    return Dataset::range(10 * e[0].item<int64_t>(), 10 * e[0].item<int64_t>() + 5).shuffle(5, 1);
  });
  EXPECT_NE(values_of(shuffled.iterator(0)), values_of(shuffled.iterator(1)));
  expect_exact_restore(shuffled, 1);
  EXPECT_THROW(Dataset::range(3).flat_map(nullptr), InvalidArgument);
}

TEST(DatasetApiTest, Concatenate) {
  auto ds = Dataset::range(3).concatenate(Dataset::range(10, 12));
  EXPECT_EQ(values_of(ds.iterator()), (std::vector<int64_t>{0, 1, 2, 10, 11}));
  EXPECT_EQ(ds.cardinality(), 5);
  EXPECT_EQ(ds.describe(), "range(0, 3, 1).concatenate(range(10, 12, 1))");
  expect_exact_restore(ds);
  expect_exact_restore(
      Dataset::range(0).concatenate(Dataset::range(2)).concatenate(Dataset::range(0)));
  EXPECT_EQ(Dataset::range(3).repeat().concatenate(Dataset::range(2)).cardinality(),
            kInfiniteCardinality);
  EXPECT_EQ(Dataset::range(3)
                .filter([](const Element&) { return true; })
                .concatenate(Dataset::range(2))
                .cardinality(),
            kUnknownCardinality);
  // Both parts iterate at the epoch asked for.
  auto shuffled = Dataset::range(6).shuffle(6, 3).concatenate(Dataset::range(6).shuffle(6, 4));
  EXPECT_NE(values_of(shuffled.iterator(0)), values_of(shuffled.iterator(1)));
  expect_exact_restore(shuffled, 2);
}

TEST(DatasetApiTest, Unbatch) {
  auto ds = Dataset::range(7).batch(3).unbatch();
  EXPECT_EQ(values_of(ds.iterator()), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ds.cardinality(), 7);
  EXPECT_EQ(Dataset::range(7).batch(3, true).unbatch().cardinality(), 6);
  EXPECT_EQ(Dataset::range(7).batch(3).prefetch(2).unbatch().cardinality(), 7);
  EXPECT_EQ(sequences({1, 2, 3}).padded_batch(2, {}, {}, true).unbatch().cardinality(), 2);
  EXPECT_EQ(Dataset::range(7)
                .batch(3)
                .filter([](const Element&) { return true; })
                .unbatch()
                .cardinality(),
            kUnknownCardinality);
  EXPECT_EQ(ds.describe(), "range(0, 7, 1).batch(3).unbatch()");
  expect_exact_restore(ds);
  expect_exact_restore(sequences({2, 1, 3}).padded_batch(2).unbatch());
  // Padded rows come back padded.
  auto rows = all_of(sequences({1, 2}).padded_batch(2).unbatch().iterator());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(torch::equal(rows[0][0], torch::tensor({0, 0})));
  // Components of different row counts, and scalars, are named errors.
  const std::string err = error_of([] {
    all_of(Dataset::from_tensor_slices({torch::zeros({1, 2}), torch::zeros({1, 3})})
               .unbatch()
               .iterator());
  });
  EXPECT_TRUE(has(err, "component 1 of input element 0 has 3 rows but component 0 has 2")) << err;
  EXPECT_TRUE(has(error_of([] { all_of(Dataset::range(2).unbatch().iterator()); }), "scalar"));
}

// ---- named components ----

TEST(DatasetApiTest, NamedComponents) {
  Element e{{"image", torch::zeros({2})}, {"label", torch::ones({})}};
  EXPECT_EQ(e.size(), 2u);
  EXPECT_TRUE(e.has_names());
  EXPECT_TRUE(torch::equal(e["label"], e[1]));
  EXPECT_EQ(e.index_of("image"), 0);
  EXPECT_EQ(e.index_of("mask"), -1);
  EXPECT_TRUE(e.contains("image"));
  e["label"] = torch::full({}, 7.0);
  EXPECT_EQ(e[1].item<float>(), 7.0f);
  EXPECT_EQ(e.describe(), "{image: [2] Float, label: [] Float}");

  const std::string missing = error_of([&] { (void)e["mask"]; });
  EXPECT_TRUE(has(missing, "no component named 'mask'")) << missing;
  EXPECT_TRUE(has(missing, "'image', 'label'")) << missing;
  Element positional{torch::zeros({1})};
  EXPECT_FALSE(positional.has_names());
  EXPECT_TRUE(positional.names().empty());
  EXPECT_TRUE(has(error_of([&] { (void)positional["image"]; }), "unnamed"));
  EXPECT_TRUE(has(error_of([] { Element::make_names({"a", "a"}); }), "'a' is given twice"));
  EXPECT_TRUE(has(error_of([] { Element::make_names({""}); }), "empty name"));
  EXPECT_TRUE(has(error_of([] {
                    Element x{torch::zeros({1})};
                    x.set_names(Element::make_names({"a", "b"}));
                  }),
                  "one name per component"));
  // Components removed after naming: the name no longer finds one.
  Element shrunk = e;
  shrunk.pop_back();
  EXPECT_TRUE(has(error_of([&] { (void)shrunk["label"]; }), "name them again"));
}

TEST(DatasetApiTest, NamesFlowThroughStages) {
  auto ds = Dataset::from_tensor_slices({{"x", torch::arange(10)}, {"y", torch::arange(10) * 2}});
  auto piped = ds.shuffle(10, 1).take(8).batch(4).prefetch(2).unbatch().filter(
      [](const Element& e) { return e["x"].item<int64_t>() % 2 == 0; });
  for (const Element& e : piped.iterator()) {
    ASSERT_EQ(e.names(), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(e["y"].item<int64_t>(), 2 * e["x"].item<int64_t>());
  }
  // cache() replays named elements; a map that edits in place keeps the names.
  auto cached = ds.map([](Element e) {
                    e["y"] = e["y"] + 1;
                    return e;
                  }).cache();
  for (int pass = 0; pass < 2; ++pass) {
    auto first = cached.iterator().next();
    ASSERT_TRUE(first);
    EXPECT_EQ((*first)["y"].item<int64_t>(), 1);
  }
  // zip joins names when every input is named, and refuses a repeated one.
  auto zipped = Dataset::zip({ds, Dataset::from_tensor_slices({{"z", torch::arange(10)}})});
  auto z = zipped.iterator().next();
  ASSERT_TRUE(z);
  EXPECT_EQ(z->names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_TRUE(has(error_of([&] { Dataset::zip({ds, ds}).iterator().next(); }), "given twice"));
  auto half = Dataset::zip({ds, Dataset::range(10)}).iterator().next();
  ASSERT_TRUE(half);
  EXPECT_FALSE(half->has_names());
  expect_exact_restore(ds.batch(3));
}

TEST(DatasetApiTest, ParseExampleNamesByTheSpec) {
  ExampleBuilder b;
  b.add_int64("label", 3);
  b.add_float("weights", std::vector<float>{0.5f, 1.5f});
  b.add_bytes("text", "hi");
  b.add_int64("tokens", std::vector<int64_t>{4, 5, 6});
  const FeatureSpec spec({FixedLenFeature{"label", FeatureType::kInt64, {}},
                          FixedLenFeature{"weights", FeatureType::kFloat, {2}},
                          FixedLenFeature{"text", FeatureType::kBytes, {}},
                          VarLenFeature{"tokens", FeatureType::kInt64},
                          VarLenFeature{"absent", FeatureType::kFloat}});
  Element e = parse_example(b.serialize(), spec);
  EXPECT_EQ(e.names(), (std::vector<std::string>{"label", "weights", "text", "tokens", "absent"}));
  EXPECT_EQ(e["label"].item<int64_t>(), 3);
  EXPECT_TRUE(torch::equal(e["weights"], torch::tensor({0.5f, 1.5f})));
  EXPECT_EQ(e["text"].size(0), 2);
  EXPECT_TRUE(torch::equal(e["tokens"], torch::tensor({4, 5, 6})));
  EXPECT_EQ(e["absent"].numel(), 0);
  // Every record of a spec shares one list of names.
  EXPECT_EQ(parse_example(b.serialize(), spec).shared_names(), e.shared_names());
}

TEST(DatasetApiTest, AutoShardPolicyLivesInTheDataNamespace) {
  data::AutoShardPolicy policy = dist::AutoShardPolicy::kFile;
  EXPECT_EQ(policy, data::AutoShardPolicy::kFile);
}

}  // namespace
}  // namespace dist::data
