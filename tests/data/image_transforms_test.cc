// image_transforms.h: the transforms' determinism, crop statistics, exact small cases and
// errors (ImageTransformsTest), and resize_image and the transforms against PIL and
// torchvision on the same images (ImageTransformsVsTorchvisionTest: DIST_TORCH_PYTHON, Debian's
// python3-torchvision 0.14 and PIL 9.4, run once for the suite).
#include "dist/data/image_transforms.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dist/core/error.h"
#include "dist/data/image_codec.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::data {
namespace {

using namespace std::chrono_literals;
using testing::message_of;

// A reproducible image: smooth gradients plus noise, so that resampling has edges to blur.
at::Tensor test_image(int64_t channels, int64_t height, int64_t width, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  const at::Tensor y = torch::arange(height, torch::kFloat).view({1, height, 1});
  const at::Tensor x = torch::arange(width, torch::kFloat).view({1, 1, width});
  const at::Tensor c = torch::arange(channels, torch::kFloat).view({channels, 1, 1});
  const at::Tensor smooth = 127.5f + 100.0f * torch::sin(x * 0.21f + y * 0.13f + c);
  const at::Tensor noise = torch::randint(-27, 28, {channels, height, width}).to(torch::kFloat);
  return (smooth + noise).clamp(0, 255).to(torch::kUInt8);
}

Element run(const ElementTransform& transform, const at::Tensor& image,
            ElementContext context = {}) {
  return transform({image, torch::tensor(7)}, context);
}

void expect_contains(const std::string& text, const std::string& what) {
  EXPECT_NE(text.find(what), std::string::npos) << "\"" << text << "\" lacks \"" << what << "\"";
}

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

// ---- against PIL and torchvision ----

// Reads cases.txt (one case a line: name, operation, input file, C, H, W, then numbers) and
// writes name.out: the reference result, uint8 or float32 [C, H, W] bytes.
const char* const kReference = R"(
import sys
import numpy as np
import torch
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F

folder = sys.argv[1]
for line in open(folder + "/cases.txt"):
    name, op, path, c, h, w, *args = line.split()
    c, h, w = int(c), int(h), int(w)
    chw = np.fromfile(folder + "/" + path, dtype=np.uint8).reshape(c, h, w)
    pil = Image.fromarray(chw[0] if c == 1 else chw.transpose(1, 2, 0))
    tensor = torch.from_numpy(chw.copy())
    n = [float(a) for a in args]
    def back(img):
        a = np.asarray(img)
        return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    if op == "pil_resize":
        out = back(pil.resize((int(n[1]), int(n[0])), Image.BILINEAR))
    elif op == "tv_resize":
        out = F.resize(tensor, [int(n[0]), int(n[1])], antialias=True).numpy()
    elif op == "tv_resize_float":
        out = F.resize(tensor.float(), [int(n[0]), int(n[1])], antialias=True).numpy()
    elif op == "tv_center_crop":
        out = F.center_crop(tensor, [int(n[0]), int(n[1])]).numpy()
    elif op == "tv_resize_shorter":
        out = back(T.Resize(int(n[0]))(pil))
    elif op == "tv_resize_center_crop":
        out = back(T.Compose([T.Resize(int(n[0])), T.CenterCrop(int(n[0]))])(pil))
    elif op == "tv_resized_crop":
        top, left, bh, bw, oh, ow = (int(v) for v in n)
        out = back(F.resized_crop(pil, top, left, bh, bw, [oh, ow]))
    elif op == "tv_normalize":
        out = T.Compose([T.ToTensor(), T.Normalize(n[:c], n[c:])])(pil).numpy()
    else:
        raise SystemExit("unknown operation " + op)
    np.ascontiguousarray(out).tofile(folder + "/" + name + ".out")
)";

class ImageTransformsVsTorchvisionTest : public ::testing::Test {
 protected:
  struct Case {
    std::string name, op;
    at::Tensor input;
    std::vector<double> numbers;
  };

  // Every comparison of the suite, computed by one Python run.
  static std::vector<Case> cases() {
    std::vector<Case> all;
    const at::Tensor rgb = test_image(3, 100, 130, 11), odd = test_image(3, 111, 96, 12);
    const at::Tensor grey = test_image(1, 120, 90, 13), small = test_image(1, 40, 52, 14);
    const at::Tensor mixed = test_image(3, 64, 48, 15);
    // Down by 1.3x, 2x, 3.7x; up; non-square down in one axis and up in the other; 1 and 3
    // channels.
    const std::vector<std::pair<at::Tensor, std::pair<int64_t, int64_t>>> sizes = {
        {rgb, {77, 100}},  {rgb, {50, 65}},   {odd, {30, 26}},   {grey, {60, 45}},
        {grey, {32, 24}},  {small, {97, 61}}, {mixed, {37, 90}}, {rgb, {100, 57}},
        {odd, {224, 224}}, {small, {40, 13}}};
    for (size_t i = 0; i < sizes.size(); ++i) {
      const auto& [image, size] = sizes[i];
      const std::vector<double> hw = {static_cast<double>(size.first),
                                      static_cast<double>(size.second)};
      all.push_back({"pil_resize" + std::to_string(i), "pil_resize", image, hw});
      all.push_back({"tv_resize" + std::to_string(i), "tv_resize", image, hw});
      all.push_back({"tv_resize_float" + std::to_string(i), "tv_resize_float", image, hw});
    }
    all.push_back({"crop0", "tv_center_crop", odd, {40, 41}});
    all.push_back({"crop1", "tv_center_crop", small, {17, 52}});
    all.push_back({"crop2", "tv_center_crop", small, {45, 60}});
    all.push_back({"shorter0", "tv_resize_shorter", rgb, {64}});
    all.push_back({"shorter1", "tv_resize_shorter", odd, {57}});
    all.push_back({"shorter2", "tv_resize_shorter", grey, {200}});
    all.push_back({"resize_crop0", "tv_resize_center_crop", rgb, {56}});
    all.push_back({"resize_crop1", "tv_resize_center_crop", odd, {33}});
    // random_resized_crop's boxes, cropped and resized by torchvision's resized_crop on PIL.
    for (uint64_t key = 0; key < 4; ++key) {
      const CropBox box = random_resized_crop_box(key + 100, 111, 96);
      all.push_back({"rrc" + std::to_string(key),
                     "tv_resized_crop",
                     odd,
                     {static_cast<double>(box.top), static_cast<double>(box.left),
                      static_cast<double>(box.height), static_cast<double>(box.width), 48, 40}});
    }
    all.push_back({"normalize0", "tv_normalize", rgb, {0.485, 0.456, 0.406, 0.229, 0.224, 0.225}});
    all.push_back({"normalize1", "tv_normalize", grey, {0.3, 0.7}});
    return all;
  }

  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    testing::write_file(dir_->file("reference.py"), kReference);
    std::ostringstream list;
    for (const Case& c : cases()) {
      const at::Tensor input = c.input.contiguous();
      testing::write_file(dir_->file(c.name + ".in"),
                          std::string(static_cast<const char*>(input.data_ptr()),
                                      static_cast<size_t>(input.numel())));
      list << c.name << ' ' << c.op << ' ' << c.name << ".in " << input.size(0) << ' '
           << input.size(1) << ' ' << input.size(2);
      for (double v : c.numbers) list << ' ' << v;
      list << '\n';
    }
    testing::write_file(dir_->file("cases.txt"), list.str());
    testing::WorkerProcesses python;
    python.start(DIST_TORCH_PYTHON, {dir_->file("reference.py"), dir_->path()}, {});
    const testing::ProcessResult result = python.wait_all(180s).at(0);
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static at::Tensor reference(const std::string& name, at::IntArrayRef shape,
                              at::ScalarType dtype) {
    const std::string bytes = testing::read_file(dir_->file(name + ".out"));
    at::Tensor out = torch::empty(shape, dtype);
    EXPECT_EQ(bytes.size(), static_cast<size_t>(out.nbytes())) << name;
    if (bytes.size() == static_cast<size_t>(out.nbytes()))
      std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
    return out;
  }

  static testing::TempDir* dir_;
};

testing::TempDir* ImageTransformsVsTorchvisionTest::dir_ = nullptr;

// The largest and mean absolute differences, printed for the record.
std::pair<double, double> differences(const at::Tensor& ours, const at::Tensor& theirs) {
  const at::Tensor d = (ours.to(torch::kDouble) - theirs.to(torch::kDouble)).abs();
  return {d.max().item<double>(), d.mean().item<double>()};
}

TEST_F(ImageTransformsVsTorchvisionTest, AntialiasedResizeIsWithinOneGreyLevelOfPilAndTorchvision) {
  double worst_pil = 0, worst_tv = 0, worst_float = 0, sum_pil = 0, sum_tv = 0;
  int count = 0;
  for (const Case& c : cases()) {
    if (c.op != "pil_resize" && c.op != "tv_resize" && c.op != "tv_resize_float") continue;
    const int64_t h = static_cast<int64_t>(c.numbers[0]), w = static_cast<int64_t>(c.numbers[1]);
    const bool is_float = c.op == "tv_resize_float";
    const at::Tensor ours = resize_image(is_float ? c.input.to(torch::kFloat) : c.input, h, w);
    const at::Tensor theirs =
        reference(c.name, {c.input.size(0), h, w}, is_float ? torch::kFloat : torch::kUInt8);
    const auto [max, mean] = differences(ours, theirs);
    EXPECT_LE(max, is_float ? 1e-3 : 1.0)
        << c.name << " " << c.input.sizes() << " -> " << h << "x" << w;
    if (c.op == "pil_resize") {
      worst_pil = std::max(worst_pil, max);
      sum_pil += mean;
      ++count;
    } else if (c.op == "tv_resize") {
      worst_tv = std::max(worst_tv, max);
      sum_tv += mean;
    } else {
      worst_float = std::max(worst_float, max);
    }
  }
  std::printf(
      "resize_image vs PIL: max %.0f, mean %.4f grey levels; vs torchvision (uint8 "
      "tensors): max %.0f, mean %.4f; float: max %.2g\n",
      worst_pil, sum_pil / count, worst_tv, sum_tv / count, worst_float);
}

TEST_F(ImageTransformsVsTorchvisionTest, CropsAndShorterSideResizesMatchTorchvision) {
  for (const Case& c : cases()) {
    if (c.op == "tv_center_crop") {
      const int64_t h = static_cast<int64_t>(c.numbers[0]), w = static_cast<int64_t>(c.numbers[1]);
      EXPECT_TRUE(torch::equal(center_crop_images(c.input, h, w),
                               reference(c.name, {c.input.size(0), h, w}, torch::kUInt8)))
          << c.name;
    } else if (c.op == "tv_resize_shorter") {
      const at::Tensor ours =
          resize_shorter_side_images(c.input, static_cast<int64_t>(c.numbers[0]));
      const at::Tensor theirs = reference(c.name, ours.sizes(), torch::kUInt8);
      EXPECT_LE(differences(ours, theirs).first, 1.0) << c.name << " " << ours.sizes();
    } else if (c.op == "tv_resized_crop") {
      const auto v = [&](size_t i) { return static_cast<int64_t>(c.numbers[i]); };
      const at::Tensor ours =
          resize_image(c.input.narrow(1, v(0), v(2)).narrow(2, v(1), v(3)), v(4), v(5));
      const at::Tensor theirs = reference(c.name, ours.sizes(), torch::kUInt8);
      EXPECT_LE(differences(ours, theirs).first, 1.0) << c.name;
    } else if (c.op == "tv_resize_center_crop") {
      const int64_t size = static_cast<int64_t>(c.numbers[0]);
      const at::Tensor ours = resize_and_center_crop_images(c.input, size, size);
      const at::Tensor theirs = reference(c.name, ours.sizes(), torch::kUInt8);
      EXPECT_LE(differences(ours, theirs).first, 1.0) << c.name;
    }
  }
}

TEST_F(ImageTransformsVsTorchvisionTest, NormalizeMatchesToTensorAndNormalize) {
  for (const Case& c : cases()) {
    if (c.op != "tv_normalize") continue;
    const size_t channels = static_cast<size_t>(c.input.size(0));
    const std::vector<double> mean(c.numbers.begin(), c.numbers.begin() + channels);
    const std::vector<double> std(c.numbers.begin() + channels, c.numbers.end());
    const at::Tensor ours = run(normalize(mean, std), c.input)[0];
    const at::Tensor theirs = reference(c.name, c.input.sizes(), torch::kFloat);
    EXPECT_LE(differences(ours, theirs).first, 1e-6) << c.name;
  }
}

}  // namespace
}  // namespace dist::data
