// image_transforms.h: the transforms' determinism, crop statistics, exact small cases and
// errors (ImageTransformsTest). Against PIL and torchvision: image_transforms_torchvision_test.cc.
#include "dist/data/image_transforms.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "data/image_transform_testing.h"
#include "dist/core/error.h"
#include "dist/data/image_codec.h"
#include "expect_error.h"
#include "test_util.h"

namespace dist::data {
namespace {

using testing::message_of;

using image_testing::run;
using image_testing::test_image;

using testing::expect_contains;

// ---- determinism ----

TEST(ImageTransformsTest, RandomTransformsArePureFunctionsOfSeedEpochAndIndex) {
  const at::Tensor image = test_image(3, 60, 80, 1);
  const std::vector<ElementTransform> transforms = {
      random_resized_crop(5, 32, 24), random_flip_up_down(5), color_jitter(5, 0.4, 0.4, 0.4, 0.1)};
  for (const auto& transform : transforms) {
    const at::Tensor a = run(transform, image, {2, 9})[0];
    EXPECT_TRUE(torch::equal(a, run(transform, image, {2, 9})[0]));
    int differ_by_index = 0, differ_by_epoch = 0;
    for (int64_t i = 0; i < 8; ++i) {
      differ_by_index += !torch::equal(a, run(transform, image, {2, 10 + i})[0]);
      differ_by_epoch += !torch::equal(a, run(transform, image, {3 + i, 9})[0]);
    }
    // A flip is the same as another draw's with probability 1/2: 8 draws all equal is 1/256.
    EXPECT_GE(differ_by_index, 1);
    EXPECT_GE(differ_by_epoch, 1);
  }
  // The label passes through.
  EXPECT_EQ(run(transforms[0], image)[1].item<int64_t>(), 7);
}

TEST(ImageTransformsTest, BatchRowsAreKeyedLikeSingleImagesOfTheirRow) {
  const at::Tensor batch = torch::stack({test_image(3, 50, 40, 2), test_image(3, 50, 40, 3)});
  const ElementTransform crop = random_resized_crop(9, 20, 20);
  const at::Tensor out = run(crop, batch, {1, 4})[0];
  ASSERT_EQ(out.sizes(), (at::IntArrayRef{2, 3, 20, 20}));
  // Row 0 of a batch is keyed as a single image.
  EXPECT_TRUE(torch::equal(out[0], run(crop, batch[0], {1, 4})[0]));
  // Deterministic transforms act on each row alike.
  EXPECT_TRUE(torch::equal(resize_images(batch, 17, 23)[1], resize_image(batch[1], 17, 23)));
  EXPECT_TRUE(
      torch::equal(run(center_crop(9, 9), batch)[0][1], center_crop_images(batch[1], 9, 9)));
  EXPECT_EQ(resize_images(batch.narrow(0, 0, 0), 5, 6).sizes(), (at::IntArrayRef{0, 3, 5, 6}));
}

// ---- random_resized_crop ----

TEST(ImageTransformsTest, RandomResizedCropBoxesFollowScaleAndRatio) {
  const int64_t h = 300, w = 400;
  double smallest = 1, largest = 0, area_sum = 0;
  const int kBoxes = 20000;
  for (uint64_t key = 0; key < kBoxes; ++key) {
    const CropBox box = random_resized_crop_box(key * 0x9E3779B97F4A7C15ULL, h, w);
    ASSERT_GE(box.top, 0);
    ASSERT_GE(box.left, 0);
    ASSERT_GE(box.height, 1);
    ASSERT_GE(box.width, 1);
    ASSERT_LE(box.top + box.height, h);
    ASSERT_LE(box.left + box.width, w);
    const double fraction = static_cast<double>(box.height * box.width) / (h * w);
    const double aspect = static_cast<double>(box.width) / static_cast<double>(box.height);
    // Sides are rounded to whole pixels: allow half a pixel on each.
    EXPECT_GE(fraction, 0.08 * (1 - 1.0 / 50)) << key;
    EXPECT_LE(fraction, 1.0) << key;
    EXPECT_GE(aspect, 0.75 * (1 - 1.0 / 30)) << key;
    EXPECT_LE(aspect, 4.0 / 3 * (1 + 1.0 / 30)) << key;
    smallest = std::min(smallest, fraction);
    largest = std::max(largest, fraction);
    area_sum += fraction;
  }
  // The fraction is drawn uniformly from [0.08, 1] but large boxes fail to fit more often:
  // torchvision's get_params gives a mean of 0.435 on this image (20000 draws, standard error
  // 0.002).
  EXPECT_LT(smallest, 0.085);
  EXPECT_GT(largest, 0.95);
  EXPECT_NEAR(area_sum / kBoxes, 0.435, 0.01);
  // Narrow scale and ratio ranges are respected closely.
  for (uint64_t key = 0; key < 200; ++key) {
    const CropBox box = random_resized_crop_box(key, 1000, 1000, {0.25, 0.25}, {1, 1});
    EXPECT_EQ(box.height, 500);
    EXPECT_EQ(box.width, 500);
  }
}

TEST(ImageTransformsTest, RandomResizedCropFallsBackToTheCentredBoxClampedToTheRatio) {
  // No box of 2 to 3 times the image's area fits: the fallback.
  EXPECT_EQ(random_resized_crop_box(1, 300, 400, {2, 3}).height, 300);  // 4/3 is allowed
  const CropBox wide = random_resized_crop_box(1, 100, 400, {2, 3});
  EXPECT_EQ(wide.height, 100);
  EXPECT_EQ(wide.width, 133);  // round(100 * 4/3)
  EXPECT_EQ(wide.left, (400 - 133) / 2);
  EXPECT_EQ(wide.top, 0);
  const CropBox tall = random_resized_crop_box(1, 400, 100, {2, 3});
  EXPECT_EQ(tall.width, 100);
  EXPECT_EQ(tall.height, 133);  // round(100 / (3/4))
  EXPECT_EQ(tall.top, (400 - 133) / 2);
  // The transform resizes the box: shape and dtype.
  const at::Tensor out = run(random_resized_crop(3, 24, 32), test_image(1, 50, 70, 4))[0];
  EXPECT_EQ(out.sizes(), (at::IntArrayRef{1, 24, 32}));
  EXPECT_EQ(out.scalar_type(), torch::kUInt8);
  EXPECT_EQ(run(random_resized_crop(3, 24, 32), test_image(3, 50, 70, 4).to(torch::kFloat))[0]
                .scalar_type(),
            torch::kFloat);
}

TEST(ImageTransformsTest, RandomResizedCropIsTheResizedBox) {
  const at::Tensor image = test_image(3, 90, 70, 5);
  const ElementContext context{4, 11};
  const at::Tensor out = run(random_resized_crop(8, 30, 30), image, context)[0];
  // The same box, from augment_key with the transform's salt (image_transforms.cc), gives the
  // same pixels from a copied crop.
  const CropBox box =
      random_resized_crop_box(augment_key(8, 0x7272633031303031ULL, context), 90, 70);
  const at::Tensor crop =
      image.narrow(1, box.top, box.height).narrow(2, box.left, box.width).contiguous();
  EXPECT_TRUE(torch::equal(out, resize_image(crop, 30, 30)));
}

// ---- flips, crops, normalize ----

TEST(ImageTransformsTest, FlipUpDownReversesRowsOrNothing) {
  const at::Tensor image = test_image(3, 5, 4, 6);
  int flipped = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const at::Tensor out = run(random_flip_up_down(1), image, {0, i})[0];
    if (torch::equal(out, image.flip({1}))) {
      ++flipped;
    } else {
      EXPECT_TRUE(torch::equal(out, image));
    }
  }
  EXPECT_GT(flipped, 5);
  EXPECT_LT(flipped, 35);
}

TEST(ImageTransformsTest, CenterCropOffsetsRoundHalvesToEvenAndPadWithZeros) {
  const at::Tensor image = torch::arange(63).to(torch::kUInt8).view({1, 7, 9});
  // (7 - 4) / 2 = 1.5 -> 2; (9 - 4) / 2 = 2.5 -> 2.
  EXPECT_TRUE(torch::equal(center_crop_images(image, 4, 4), image.narrow(1, 2, 4).narrow(2, 2, 4)));
  // Larger than the image: zeros around, the image at floor(pad / 2).
  const at::Tensor padded = center_crop_images(image, 10, 9);
  EXPECT_EQ(padded.sizes(), (at::IntArrayRef{1, 10, 9}));
  EXPECT_TRUE(torch::equal(padded.narrow(1, 1, 7), image));
  EXPECT_EQ(padded[0][0].sum().item<int64_t>(), 0);
  EXPECT_EQ(padded[0].narrow(0, 8, 2).sum().item<int64_t>(), 0);
}

TEST(ImageTransformsTest, ResizeShorterSideAndResizeAndCenterCropSizes) {
  const at::Tensor image = test_image(3, 75, 100, 7);
  EXPECT_EQ(resize_shorter_side_images(image, 50).sizes(), (at::IntArrayRef{3, 50, 66}));
  EXPECT_EQ(resize_shorter_side_images(image.transpose(1, 2), 50).sizes(),
            (at::IntArrayRef{3, 66, 50}));
  EXPECT_EQ(resize_and_center_crop_images(image, 40, 40).sizes(), (at::IntArrayRef{3, 40, 40}));
  // Square target: Resize(40) then CenterCrop(40).
  EXPECT_TRUE(torch::equal(resize_and_center_crop_images(image, 40, 40),
                           center_crop_images(resize_shorter_side_images(image, 40), 40, 40)));
  // A wide target on a 4:3 image: the width fits (100 -> 90) and the height is cropped.
  EXPECT_TRUE(torch::equal(resize_and_center_crop_images(image, 30, 90),
                           center_crop_images(resize_image(image, 67, 90), 30, 90)));
  EXPECT_EQ(run(resize_and_center_crop(31, 17), image)[0].sizes(), (at::IntArrayRef{3, 31, 17}));
  EXPECT_EQ(run(resize(31, 17), image)[0].sizes(), (at::IntArrayRef{3, 31, 17}));
  EXPECT_EQ(run(resize_shorter_side(30), image)[0].sizes(), (at::IntArrayRef{3, 30, 40}));
}

TEST(ImageTransformsTest, NormalizeScalesBytesToUnitThenStandardises) {
  const at::Tensor image = torch::tensor({0, 255, 51, 102}, torch::kUInt8).view({2, 1, 2});
  const at::Tensor out = run(normalize({0.5, 0.2}, {0.25, 0.1}), image)[0];
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(out, torch::tensor({-2.0f, 2.0f, 0.0f, 2.0f}).view({2, 1, 2})))
      << out;
  // Floating images are taken as 0..1; one value applies to every channel.
  EXPECT_TRUE(torch::allclose(run(normalize({0.5}, {0.5}), torch::ones({3, 2, 2}))[0],
                              torch::ones({3, 2, 2})));
  EXPECT_EQ(normalize_images(torch::zeros({4, 3, 5, 5}), kImageNetMean, kImageNetStd).sizes(),
            (at::IntArrayRef{4, 3, 5, 5}));
}

TEST(ImageTransformsTest, ColorJitterStaysInRangeAndLeavesWhatItMustAlone) {
  const at::Tensor image = test_image(3, 20, 30, 8);
  // Nothing asked: the image unchanged.
  EXPECT_TRUE(torch::equal(run(color_jitter(1, 0, 0, 0, 0), image)[0], image));
  // Brightness alone on a constant image: a constant within the factor range, truncated.
  const at::Tensor grey = torch::full({3, 4, 4}, 100, torch::kUInt8);
  for (int64_t i = 0; i < 20; ++i) {
    const at::Tensor out = run(color_jitter(2, 0.5), grey, {0, i})[0];
    const int64_t v = out[0][0][0].item<int64_t>();
    EXPECT_TRUE(torch::equal(out, torch::full({3, 4, 4}, v, torch::kUInt8)));
    EXPECT_GE(v, 50);
    EXPECT_LE(v, 150);
  }
  // Saturation and hue leave grey pixels grey (R = G = B) and one-channel images alone.
  const at::Tensor grey_rgb = test_image(1, 10, 10, 9).expand({3, 10, 10}).contiguous();
  const at::Tensor shifted = run(color_jitter(3, 0, 0, 0.9, 0.5), grey_rgb, {0, 1})[0];
  EXPECT_LE((shifted.to(torch::kInt) - grey_rgb.to(torch::kInt)).abs().max().item<int>(), 1);
  const at::Tensor one = test_image(1, 10, 10, 10);
  EXPECT_TRUE(torch::equal(run(color_jitter(3, 0, 0, 0.9, 0.5), one)[0], one));
  // Hue keeps each pixel's largest channel (HSV's value) within a grey level.
  const at::Tensor hue = run(color_jitter(4, 0, 0, 0, 0.5), image, {0, 3})[0];
  EXPECT_FALSE(torch::equal(hue, image));
  EXPECT_LE((std::get<0>(hue.max(0)).to(torch::kInt) - std::get<0>(image.max(0)).to(torch::kInt))
                .abs()
                .max()
                .item<int>(),
            1);
  // Floating images stay in 0..1 and keep their dtype.
  const at::Tensor f =
      run(color_jitter(5, 0.9, 0.9, 0.9, 0.3), image.to(torch::kFloat) / 255, {0, 2})[0];
  EXPECT_EQ(f.scalar_type(), torch::kFloat);
  EXPECT_GE(f.min().item<float>(), 0.0f);
  EXPECT_LE(f.max().item<float>(), 1.0f);
}

// ---- errors ----

TEST(ImageTransformsTest, BadArgumentsNameTheTransformAndTheValue) {
  expect_contains(message_of<InvalidArgument>([] { resize(0, 5); }),
                  "resize: height must be 1 to kMaxImagePixels, got 0");
  expect_contains(message_of<InvalidArgument>([] { center_crop(4, -1); }),
                  "center_crop: width must be");
  expect_contains(message_of<InvalidArgument>([] { resize_shorter_side(0); }),
                  "resize_shorter_side: size must be");
  expect_contains(
      message_of<InvalidArgument>([] {
        random_resized_crop(1, 8, 8, {0.5, 0.1});
      }),
      "random_resized_crop: scale must be {low, high} with 0 < low <= high, got {0.5, 0.1}");
  expect_contains(message_of<InvalidArgument>([] {
                    random_resized_crop(1, 8, 8, {0.1, 1}, {0, 1});
                  }),
                  "random_resized_crop: ratio must be");
  expect_contains(message_of<InvalidArgument>([] {
                    normalize({0.5, 0.5}, {0.2});
                  }),
                  "normalize: needs one mean and one std per channel, got 2 means and 1 stds");
  expect_contains(message_of<InvalidArgument>([] { normalize({0.5}, {0}); }),
                  "normalize: channel 0 needs a finite mean and a finite positive std");
  expect_contains(message_of<InvalidArgument>([] {
                    run(normalize(kImageNetMean, kImageNetStd), torch::zeros({1, 4, 4}));
                  }),
                  "normalize: 3 means and stds for an image of 1 channels");
  expect_contains(message_of<InvalidArgument>([] { color_jitter(1, -0.1); }),
                  "color_jitter: brightness must be a finite value >= 0");
  expect_contains(message_of<InvalidArgument>([] { color_jitter(1, 0, 0, 0, 0.6); }),
                  "color_jitter: hue must be 0 to 0.5");
  expect_contains(message_of<InvalidArgument>([] {
                    run(color_jitter(1, 0.1), torch::zeros({2, 4, 4}));
                  }),
                  "color_jitter: needs grey (1 channel) or RGB (3 channels) images, got 2");
  expect_contains(message_of<InvalidArgument>([] {
                    random_resized_crop(1, 8, 8)({torch::zeros({4, 4})}, {});
                  }),
                  "random_resized_crop: component 0 must be an image [C, H, W]");
  expect_contains(message_of<InvalidArgument>([] {
                    resize(4, 4, 2)({torch::zeros({1, 4, 4})}, {});
                  }),
                  "resize: the element has 1 components, so it has no component 2");
  expect_contains(message_of<InvalidArgument>([] {
                    resize_images(torch::zeros({1, 4, 4}, torch::kInt), 2, 2);
                  }),
                  "resize: needs a uint8 or floating image");
}

}  // namespace
}  // namespace dist::data
