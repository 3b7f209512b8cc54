// image_transforms.h against PIL and torchvision: resize_image and the transforms on the same
// images (ImageTransformsVsTorchvisionTest: DIST_TORCH_PYTHON, Debian's python3-torchvision 0.14
// and PIL 9.4, run once for the suite). The transforms alone: image_transforms_test.cc.
#include "dist/data/image_transforms.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "data/image_transform_testing.h"
#include "dist/data/image_codec.h"
#include "multi_worker/process_group.h"
#include "test_util.h"

namespace dist::data {
namespace {

using namespace std::chrono_literals;

using image_testing::run;
using image_testing::test_image;

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
