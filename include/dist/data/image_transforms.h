// The image transforms of torchvision.transforms and tf.image, as ElementTransform functions
// for Dataset::map_with_context (augment.h), so that a Python recipe reads the same in C++.
// Random ones are pure functions of (seed, epoch, index): one device's images on any number
// of replicas or workers, resumed or not. Bad arguments are InvalidArgument naming the
// transform and the value; the functions hold no mutable state (any thread).
//
//   // torchvision: RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(...)
//   auto train = image_folder(dir, {3}).map_with_context(compose({random_resized_crop(1, 224,
//       224), random_flip_left_right(2), normalize(kImageNetMean, kImageNetStd)}), MapOptions{});
//
// Images, dtypes, resizing and randomness in full: docs/guide.md, "The image transforms".
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/data/augment.h"

namespace dist::data {

// ---- deterministic: resizing and cropping ----

// Resizes to height x width, antialiased (torchvision's Resize((h, w)), tf.image.resize with
// antialias=True up to the filter: see resize_image). The aspect ratio is not kept.
ElementTransform resize(int64_t height, int64_t width, size_t component = 0);

// Resizes so that the shorter side is `size` and the aspect ratio is kept: torchvision's
// Resize(size). The longer side is floor(size * longer / shorter), as torchvision computes it.
ElementTransform resize_shorter_side(int64_t size, size_t component = 0);

// Crops the centred height x width window: torchvision's CenterCrop((h, w)), whose offsets are
// round((H - h) / 2) and round((W - w) / 2) with halves to even (Python's round). A side
// larger than the image is padded with zeros around it first, as CenterCrop does.
ElementTransform center_crop(int64_t height, int64_t width, size_t component = 0);

// The evaluation policy that keeps the aspect ratio and gives height x width: resizes by the
// smallest factor that makes the image cover height x width (one side fits exactly, the other
// is floor'd as in resize_shorter_side), then crops the centre. For a square target this is
// torchvision's Resize(size) + CenterCrop(size); Keras' crop_to_aspect_ratio=True crops the
// same window before resizing instead (the same region, pixels within interpolation).
ElementTransform resize_and_center_crop(int64_t height, int64_t width, size_t component = 0);

// The same four on a tensor, an image [C, H, W] or a batch [N, C, H, W], uint8 or floating:
// for code that is not a Dataset stage. Each returns a new contiguous tensor.
at::Tensor resize_images(const at::Tensor& images, int64_t height, int64_t width);
at::Tensor resize_shorter_side_images(const at::Tensor& images, int64_t size);
at::Tensor center_crop_images(const at::Tensor& images, int64_t height, int64_t width);
at::Tensor resize_and_center_crop_images(const at::Tensor& images, int64_t height, int64_t width);

// ---- random geometry ----

// torchvision's RandomResizedCrop(size=(height, width), scale, ratio) with bilinear
// antialiased resizing: up to 10 attempts draw an area fraction uniformly from `scale` and an
// aspect ratio (width / height) log-uniformly from `ratio`; the first box that fits the image
// (sides rounded to the nearest integer) is placed uniformly at random; if none fits, the
// centred box of the whole image clamped to `ratio` is taken. The box is then resized to
// height x width. Needs 0 < scale[0] <= scale[1] and 0 < ratio[0] <= ratio[1] (checked here;
// a scale above 1 is allowed, as torchvision, and only makes boxes fail to fit).
ElementTransform random_resized_crop(uint64_t seed, int64_t height, int64_t width,
                                     std::array<double, 2> scale = {0.08, 1.0},
                                     std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0},
                                     size_t component = 0);

// A crop window in an image: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// The box random_resized_crop takes in an image_height x image_width image for the 64-bit key
// `key` (augment_key of the transform's seed, its salt, the context and the row); exposed so
// that tests and tools can see the crops' statistics. Same requirements on scale and ratio.
CropBox random_resized_crop_box(uint64_t key, int64_t image_height, int64_t image_width,
                                std::array<double, 2> scale = {0.08, 1.0},
                                std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0});

// random_flip_left_right(seed, component) is in augment.h. Flips the image upside down
// (reverses the rows) with probability 1/2: torchvision's RandomVerticalFlip,
// tf.image.random_flip_up_down.
ElementTransform random_flip_up_down(uint64_t seed, size_t component = 0);

// ---- values ----

// The per-channel statistics of ImageNet's training set that torchvision's pretrained models
// expect (RGB, on images scaled to 0..1).
inline const std::vector<double> kImageNetMean = {0.485, 0.456, 0.406};
inline const std::vector<double> kImageNetStd = {0.229, 0.224, 0.225};

// torchvision's ToTensor on uint8 images of any shape: float32 in [0, 1] (x / 255), as
// load_mnist_format and normalize scale them.
at::Tensor scale_images(const at::Tensor& bytes);
// An element (or batch) whose first tensor holds uint8 images, with them scaled
// (InvalidArgument otherwise): for map() after batch(), one conversion a batch.
Element scale_images_of(Element element);

// torchvision's ToTensor + Normalize(mean, std): out[c] = (x[c] - mean[c]) / std[c], where x is
// the image scaled to 0..1 (uint8 divided by 255; floating images are taken as already 0..1).
// The result is float32. mean and std need one value per channel (one value is also accepted
// and applies to every channel); checked here (equal, non-empty lengths; finite means; finite
// positive stds) and against the image's channel count when applied.
ElementTransform normalize(std::vector<double> mean, std::vector<double> std, size_t component = 0);
at::Tensor normalize_images(const at::Tensor& images, const std::vector<double>& mean,
                            const std::vector<double>& std);

// torchvision's ColorJitter(brightness, contrast, saturation, hue) on tensors: factors drawn
// uniformly from [max(0, 1 - b), 1 + b], the same for contrast and saturation, and a hue shift
// from [-hue, hue]; the four adjustments applied in a random order; a 0 leaves its adjustment
// out. brightness scales the pixels; contrast blends with the mean of the image's grey
// (0.2989 R + 0.587 G + 0.114 B); saturation blends with the grey image; hue rotates the hue in
// HSV. Results are clamped to the range (0..255 or 0..1); uint8 results are truncated, as
// torchvision's tensor functions do. Saturation and hue leave grey (1-channel) images alone.
// Needs brightness, contrast, saturation >= 0 and 0 <= hue <= 0.5, all finite (checked here);
// the image must have 1 or 3 channels (checked when applied).
ElementTransform color_jitter(uint64_t seed, double brightness, double contrast = 0,
                              double saturation = 0, double hue = 0, size_t component = 0);

}  // namespace dist::data
