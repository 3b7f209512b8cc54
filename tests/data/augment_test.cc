// Keyed random augmentation (augment.h): determinism per (seed, epoch, index), exact resume,
// and the same images whatever the number of replicas or workers.
#include "dist/data/augment.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "dist/core/error.h"
#include "dist/distribute/batch_split.h"
#include "dist/distribute/mirrored_strategy.h"
#include "expect_error.h"

namespace dist::data {
namespace {

// A [1, size, size] float image whose pixels are all different, so any crop or flip shows.
at::Tensor distinct_image(int64_t size) {
  return torch::arange(size * size, torch::kFloat).reshape({1, size, size});
}

at::Tensor apply(const ElementTransform& t, const at::Tensor& image, ElementContext context) {
  return t(Element{image}, context).at(0);
}

// The (top, left) at which `crop` sits in `full`, or (-1, -1).
std::pair<int64_t, int64_t> window_of(const at::Tensor& full, const at::Tensor& crop) {
  const int64_t size = crop.size(-1);
  for (int64_t top = 0; top + size <= full.size(-2); ++top)
    for (int64_t left = 0; left + size <= full.size(-1); ++left)
      if (torch::equal(full.narrow(-2, top, size).narrow(-1, left, size), crop)) return {top, left};
  return {-1, -1};
}

// The message of the InvalidArgument that fn throws, or "" (a test failure) if it throws none.
template <typename Fn>
std::string invalid_argument_message(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InvalidArgument";
  return "";
}

using testing::expect_contains;

ElementTransform cyclegan_augment() {
  return compose(
      {random_jitter(11, 34, 28), random_flip_left_right(12), normalize_to_unit_range(0, 255)});
}

TEST(AugmentTest, SameSeedEpochAndIndexGiveIdenticalImages) {
  auto image = distinct_image(28);
  auto augment = cyclegan_augment();
  int index_differs = 0, epoch_differs = 0, seed_differs = 0;
  auto other_seed = compose(
      {random_jitter(99, 34, 28), random_flip_left_right(98), normalize_to_unit_range(0, 255)});
  for (int64_t i = 0; i < 32; ++i) {
    auto a = apply(augment, image, {2, i});
    EXPECT_TRUE(torch::equal(a, apply(augment, image, {2, i}))) << "index " << i;
    EXPECT_TRUE(torch::equal(a, apply(cyclegan_augment(), image, {2, i}))) << "index " << i;
    index_differs += !torch::equal(a, apply(augment, image, {2, i + 1}));
    epoch_differs += !torch::equal(a, apply(augment, image, {3, i}));
    seed_differs += !torch::equal(a, apply(other_seed, image, {2, i}));
  }
  // 7 x 7 offsets x 2 flips: two draws agree with probability 1/98.
  EXPECT_GE(index_differs, 28);
  EXPECT_GE(epoch_differs, 28);
  EXPECT_GE(seed_differs, 28);
}

TEST(AugmentTest, FlipMirrorsAboutHalfTheImagesAndKeysBatchRowsLikeSingleImages) {
  auto image = distinct_image(6);
  auto mirrored = at::flip(image, {-1});
  auto flip = random_flip_left_right(5);
  int flipped = 0;
  for (int64_t i = 0; i < 200; ++i) {
    auto out = apply(flip, image, {0, i});
    const bool was_flipped = torch::equal(out, mirrored);
    EXPECT_TRUE(was_flipped || torch::equal(out, image)) << "index " << i;
    flipped += was_flipped;
    // A batch of one is keyed like the single image (row 0).
    EXPECT_TRUE(torch::equal(apply(flip, image.unsqueeze(0), {0, i}), out.unsqueeze(0)));
  }
  EXPECT_GT(flipped, 70);
  EXPECT_LT(flipped, 130);

  // Rows of a batch get their own decisions.
  auto batch = image.unsqueeze(0).expand({64, 1, 6, 6}).contiguous();
  auto out = apply(flip, batch, {0, 0});
  int rows_flipped = 0;
  for (int64_t n = 0; n < 64; ++n) {
    const bool was_flipped = torch::equal(out[n], mirrored);
    EXPECT_TRUE(was_flipped || torch::equal(out[n], image)) << "row " << n;
    rows_flipped += was_flipped;
  }
  EXPECT_GT(rows_flipped, 10);
  EXPECT_LT(rows_flipped, 54);
}

TEST(AugmentTest, JitterCropsEveryWindowOfTheResizedImage) {
  // 14 -> 28 nearest doubles every pixel, so the resized image is known exactly.
  auto image = distinct_image(14);
  auto resized = image.repeat_interleave(2, 1).repeat_interleave(2, 2);
  auto jitter = random_jitter(3, 28, 25);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < 400; ++i) {
    auto out = apply(jitter, image, {0, i});
    ASSERT_EQ(out.sizes(), (at::IntArrayRef{1, 25, 25}));
    auto offset = window_of(resized, out);
    ASSERT_GE(offset.first, 0) << "index " << i << ": not a window of the resized image";
    offsets.insert(offset);
  }
  EXPECT_EQ(offsets.size(), 16u);  // all 4 x 4 offsets, including both edges

  // Resizing to the image's own size and cropping all of it changes nothing, in either mode.
  EXPECT_TRUE(torch::equal(apply(random_jitter(3, 14, 14), image, {0, 0}), image));
  EXPECT_TRUE(torch::equal(apply(random_jitter(3, 14, 14, Interpolation::kBilinear), image, {0, 0}),
                           image));

  // Bilinear: the crop is a window of tf.image.resize's bilinear (half-pixel) image.
  auto smooth = at::upsample_bilinear2d(image.unsqueeze(0), {34, 34}, false).squeeze(0);
  auto out = apply(random_jitter(3, 34, 28, Interpolation::kBilinear), image, {0, 7});
  EXPECT_GE(window_of(smooth, out).first, 0);

  // Bytes keep their dtype; empty batches keep their emptiness.
  auto bytes = image.to(torch::kUInt8);
  EXPECT_EQ(apply(jitter, bytes, {0, 0}).scalar_type(), torch::kUInt8);
  EXPECT_EQ(apply(jitter, torch::zeros({0, 1, 14, 14}), {0, 0}).sizes(),
            (at::IntArrayRef{0, 1, 25, 25}));
}

TEST(AugmentTest, NormalizationMapsTheEndsExactlyToMinusOneAndOne) {
  auto bytes = torch::tensor({0, 255, 51}, torch::kUInt8).reshape({1, 1, 3});
  auto out = apply(normalize_to_unit_range(0, 255), bytes, {0, 0});
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  EXPECT_EQ(out[0][0][0].item<float>(), -1.0f);
  EXPECT_EQ(out[0][0][1].item<float>(), 1.0f);
  EXPECT_NEAR(out[0][0][2].item<float>(), -0.6f, 1e-6);

  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    auto unit = torch::tensor({0.0, 1.0, 0.5}, dtype).reshape({1, 1, 3});
    auto x = apply(normalize_to_unit_range(0, 1), unit, {0, 0});
    EXPECT_EQ(x.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(x, torch::tensor({-1.0, 1.0, 0.0}, dtype).reshape({1, 1, 3})));
  }
  // Over real pixel values, the output stays within [-1, 1].
  auto all_bytes = torch::arange(256).to(torch::kUInt8).reshape({1, 16, 16});
  auto all = apply(normalize_to_unit_range(0, 255), all_bytes, {0, 0});
  EXPECT_EQ(all.min().item<float>(), -1.0f);
  EXPECT_EQ(all.max().item<float>(), 1.0f);
}

TEST(AugmentTest, OtherComponentsPassThrough) {
  auto label = torch::tensor(7);
  auto out = cyclegan_augment()(Element{distinct_image(28), label}, {0, 3});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[1].is_same(label));
  auto second = random_flip_left_right(1, /*component=*/1)(Element{label, distinct_image(4)}, {});
  EXPECT_TRUE(second[0].is_same(label));
}

TEST(AugmentTest, BadArgumentsNameTheTransformAndTheValue) {
  auto m = invalid_argument_message([] { random_jitter(1, 28, 34); });
  expect_contains(m, "random_jitter");
  expect_contains(m, "34");
  m = invalid_argument_message([] { random_jitter(1, -3, 2); });
  expect_contains(m, "random_jitter");
  expect_contains(m, "-3");
  m = invalid_argument_message([] { random_jitter(1, 28, -2); });
  expect_contains(m, "-2");
  m = invalid_argument_message([] {
    random_jitter(1, 30, 28)(Element{torch::zeros({28, 28})}, {});
  });
  expect_contains(m, "random_jitter");
  expect_contains(m, "[28, 28]");
  m = invalid_argument_message([] {
    random_flip_left_right(1)(Element{torch::zeros({1, 1, 1, 2, 2})}, {});
  });
  expect_contains(m, "random_flip_left_right");
  expect_contains(m, "[1, 1, 1, 2, 2]");
  m = invalid_argument_message([] {
    random_flip_left_right(1, 2)(Element{torch::zeros({1, 2, 2})}, {});
  });
  expect_contains(m, "component 2");
  m = invalid_argument_message([] {
    random_jitter(1, 30, 28, Interpolation::kBilinear)(
        Element{torch::zeros({1, 28, 28}, torch::kUInt8)}, {});
  });
  expect_contains(m, "bilinear");
  m = invalid_argument_message([] { normalize_to_unit_range(1, 1); });
  expect_contains(m, "normalize_to_unit_range");
  expect_contains(m, "low 1 and high 1");
  m = invalid_argument_message(
      [] { normalize_to_unit_range(0, std::numeric_limits<double>::infinity()); });
  expect_contains(m, "inf");
  m = invalid_argument_message([] { compose({random_flip_left_right(1), ElementTransform()}); });
  expect_contains(m, "transform 1");
}

// 60 random images with their row as label.
Dataset images_and_labels(int64_t n = 60) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
  auto images = at::randint(0, 256, {n, 1, 28, 28}, gen, torch::kFloat);
  return Dataset::from_tensor_slices({images, torch::arange(n)});
}

std::vector<Element> drain(Iterator it) {
  std::vector<Element> out;
  while (auto e = it.next()) out.push_back(std::move(*e));
  return out;
}

void expect_same_batches(const std::vector<Element>& a, const std::vector<Element>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (size_t k = 0; k < a[i].size(); ++k)
      EXPECT_TRUE(torch::equal(a[i][k], b[i][k])) << "batch " << i << " component " << k;
  }
}

TEST(AugmentTest, RestoredIteratorGivesTheSameImagesBitForBit) {
  // With shuffle (restore replays), without (batch and map skip without calling the map), and
  // across repetitions (each repetition is its own epoch for the map).
  const std::vector<Dataset> pipelines = {
      images_and_labels().map_with_context(cyclegan_augment()).shuffle(60, 4).batch(8).prefetch(2),
      images_and_labels().map_with_context(cyclegan_augment()).batch(8),
      images_and_labels().map_with_context(cyclegan_augment()).repeat(2).batch(8)};
  for (const auto& ds : pipelines) {
    SCOPED_TRACE(ds.describe());
    auto it = ds.iterator(/*epoch=*/1);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(it.next());
    auto saved = it.position();
    auto rest = drain(std::move(it));
    ASSERT_FALSE(rest.empty());
    expect_same_batches(drain(ds.iterator_at(saved)), rest);
    // Two batches before the end too (in the second repetition for the last pipeline).
    auto full = drain(ds.iterator(1));
    const int64_t late = static_cast<int64_t>(full.size()) - 2;
    expect_same_batches(drain(ds.iterator_at({1, late})),
                        std::vector<Element>(full.begin() + late, full.end()));
  }
  // The augmentation really changes between epochs.
  auto ds = pipelines[1];
  EXPECT_FALSE(torch::equal(ds.iterator(0).next()->at(0), ds.iterator(1).next()->at(0)));
}

MirroredOptions replicas_on_cpu(int replicas) {
  MirroredOptions options;
  for (int r = 0; r < replicas; ++r) options.devices.push_back("cpu:" + std::to_string(r));
  options.threads_per_replica = 1;
  return options;
}

// Each worker process builds its own pipeline: a fresh one per call, as in a real job.
Dataset global_batches() {
  return images_and_labels(50).map_with_context(cyclegan_augment()).shuffle(50, 3).batch(12);
}

TEST(AugmentTest, ReplicasSeeTheOneDeviceBatchWhateverTheirNumber) {
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    auto expected = drain(global_batches().iterator(epoch));
    ASSERT_EQ(expected.size(), 5u);  // 4 x 12 + 2: the last step leaves replicas empty
    for (int replicas : {1, 2, 3}) {
      SCOPED_TRACE(std::to_string(replicas) + " replicas, epoch " + std::to_string(epoch));
      MirroredStrategy strategy(replicas_on_cpu(replicas));
      size_t step = 0;
      for (const auto& per_replica :
           strategy.experimental_distribute_dataset(global_batches()).iterator(epoch)) {
        ASSERT_LT(step, expected.size());
        for (size_t k = 0; k < 2; ++k) {
          std::vector<at::Tensor> parts;
          for (const auto& share : per_replica.values()) parts.push_back(share[k]);
          EXPECT_TRUE(torch::equal(at::cat(parts), expected[step][k]))
              << "step " << step << " component " << k;
        }
        ++step;
      }
      EXPECT_EQ(step, expected.size());
    }
  }
}

// Multi-worker auto-sharding (AutoShardPolicy kData, strategy_extended.cc) runs the whole
// pipeline on every worker and keeps the rows of its replicas from each global batch. Here
// each "worker" builds its own pipeline and takes those rows with batch_share, as
// distribute_batch does for replicas [w * R, (w + 1) * R) of W * R.
TEST(AugmentTest, WorkersShardsTogetherAreTheOneWorkerBatch) {
  auto expected = drain(global_batches().iterator(1));
  for (int workers : {2, 3}) {
    for (int replicas_per_worker : {1, 2}) {
      SCOPED_TRACE(std::to_string(workers) + " workers of " + std::to_string(replicas_per_worker));
      const int total = workers * replicas_per_worker;
      std::vector<std::vector<Element>> per_worker;
      for (int w = 0; w < workers; ++w) per_worker.push_back(drain(global_batches().iterator(1)));
      for (size_t step = 0; step < expected.size(); ++step) {
        for (size_t k = 0; k < 2; ++k) {
          std::vector<at::Tensor> parts;
          for (int w = 0; w < workers; ++w)
            for (int r = 0; r < replicas_per_worker; ++r)
              parts.push_back(
                  batch_share(per_worker[w].at(step), w * replicas_per_worker + r, total)[k]);
          EXPECT_TRUE(torch::equal(at::cat(parts), expected[step][k])) << "step " << step;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dist::data
