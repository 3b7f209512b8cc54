// torchvision's and tf.image's transforms as ElementTransforms: see
// include/dist/data/image_transforms.h. Resizing is resize_image's antialiased filter; random
// draws come from a splitmix64 stream seeded by augment_key (augment.h), so every decision is
// a pure function of (seed, salt, epoch, index, row).
#include "dist/data/image_transforms.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "data/images/image_rows.h"
#include "dist/core/error.h"
#include "dist/data/image_codec.h"

namespace dist::data {
namespace {

using detail::for_each_row;
using detail::image_of;

constexpr uint64_t kResizedCropSalt = 0x7272633031303031ULL;  // "rrc01001"
constexpr uint64_t kFlipUpDownSalt = 0x666c697055443031ULL;   // "flipUD01"
constexpr uint64_t kColorJitterSalt = 0x6a69747465724331ULL;  // "jitterC1"

// A stream of 64-bit draws from one key: the splitmix64 sequence started at the key.
class KeyedDraws {
 public:
  explicit KeyedDraws(uint64_t key) : state_(key) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), from 53 random bits.
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  // Uniform in [0, n), n >= 1 (multiply-shift of 64 bits: the bias is below n / 2^64).
  int64_t below(int64_t n) {
    return static_cast<int64_t>(
        (static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(n)) >> 64);
  }

 private:
  uint64_t state_;
};

void check_images(const at::Tensor& images, const char* transform) {
  DIST_CHECK_ARG(images.defined() && (images.dim() == 3 || images.dim() == 4), transform,
                 ": needs an image [C, H, W] or a batch of images [N, C, H, W], got shape ",
                 images.defined() ? images.sizes() : at::IntArrayRef{},
                 "; give [H, W] images a channel dimension with unsqueeze(0)");
  DIST_CHECK_ARG(images.scalar_type() == at::kByte || images.is_floating_point(), transform,
                 ": needs a uint8 or floating image, got ", images.scalar_type());
  DIST_CHECK_ARG(images.size(-1) > 0 && images.size(-2) > 0 && images.size(-3) > 0, transform,
                 ": the image of shape ", images.sizes(), " has no pixels");
}

// An ElementTransform applying a deterministic tensor function to the component.
ElementTransform on_component(const char* name, size_t component,
                              std::function<at::Tensor(const at::Tensor&)> fn) {
  return [name, component, fn = std::move(fn)](Element element, const ElementContext&) {
    element[component] = fn(image_of(element, component, name));
    return element;
  };
}

void check_size(const char* transform, const char* what, int64_t value) {
  DIST_CHECK_ARG(value >= 1 && value <= kMaxImagePixels, transform, ": ", what,
                 " must be 1 to kMaxImagePixels, got ", value);
}

// torchvision's CenterCrop offset: round((in - out) / 2) with halves to even.
int64_t centred_offset(int64_t in, int64_t out) {
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(in - out) / 2.0));
}

at::Tensor center_crop_one(const at::Tensor& image, int64_t height, int64_t width) {
  at::Tensor padded = image;
  const int64_t h = image.size(-2), w = image.size(-1);
  if (height > h || width > w) {  // pad around with zeros first, as torchvision
    const int64_t ph = std::max<int64_t>(height - h, 0), pw = std::max<int64_t>(width - w, 0);
    padded = at::constant_pad_nd(image, {pw / 2, (pw + 1) / 2, ph / 2, (ph + 1) / 2}, 0);
  }
  return padded.narrow(-2, centred_offset(padded.size(-2), height), height)
      .narrow(-1, centred_offset(padded.size(-1), width), width)
      .contiguous();
}

// The size that covers height x width with the aspect ratio kept: one side fits exactly and
// the other is floor(side * other / this), torchvision's int(size * long / short).
std::pair<int64_t, int64_t> covering_size(int64_t in_h, int64_t in_w, int64_t height,
                                          int64_t width) {
  if (height * in_w >= width * in_h) return {height, height * in_w / in_h};
  return {width * in_h / in_w, width};
}

void check_scale_ratio(const char* transform, std::array<double, 2> scale,
                       std::array<double, 2> ratio) {
  DIST_CHECK_ARG(
      std::isfinite(scale[0]) && std::isfinite(scale[1]) && scale[0] > 0 && scale[0] <= scale[1],
      transform, ": scale must be {low, high} with 0 < low <= high, got {", scale[0], ", ",
      scale[1], "}; torchvision's default is {0.08, 1}");
  DIST_CHECK_ARG(
      std::isfinite(ratio[0]) && std::isfinite(ratio[1]) && ratio[0] > 0 && ratio[0] <= ratio[1],
      transform, ": ratio must be {low, high} with 0 < low <= high, got {", ratio[0], ", ",
      ratio[1], "}; torchvision's default is {3/4, 4/3}");
}

// ---- colour (torchvision's tensor functions: float arithmetic, uint8 truncated) ----

double max_value(const at::Tensor& image) { return image.is_floating_point() ? 1.0 : 255.0; }

// ratio * a + (1 - ratio) * b, clamped to the range, in a's dtype (uint8 truncated).
at::Tensor blend(const at::Tensor& a, const at::Tensor& b, double ratio) {
  const at::Tensor mixed =
      a.to(at::kFloat).mul(ratio).add_(b.to(at::kFloat), 1.0 - ratio).clamp_(0, max_value(a));
  return mixed.to(a.scalar_type());
}

// 0.2989 R + 0.587 G + 0.114 B as [1, H, W], in the image's dtype (uint8 truncated).
at::Tensor grey_of(const at::Tensor& rgb) {
  const at::Tensor f = rgb.to(at::kFloat);
  return f[0].mul(0.2989).add_(f[1], 0.587).add_(f[2], 0.114).unsqueeze(0).to(rgb.scalar_type());
}

at::Tensor adjust_contrast(const at::Tensor& image, double factor) {
  const at::Tensor grey = image.size(0) == 3 ? grey_of(image) : image;
  return blend(image, grey.to(at::kFloat).mean().expand_as(image), factor);
}

// RGB in 0..1 [3, H, W] float to H, S, V (each [H, W]) and back; hue in [0, 1).
at::Tensor shift_hue(const at::Tensor& rgb, double shift) {
  const at::Tensor r = rgb[0], g = rgb[1], b = rgb[2];
  const at::Tensor maxc = at::max(at::max(r, g), b), minc = at::min(at::min(r, g), b);
  const at::Tensor range = maxc - minc;
  const at::Tensor grey = range.eq(0);
  const at::Tensor s = range / at::where(maxc.eq(0), at::ones_like(maxc), maxc);
  const at::Tensor div = at::where(grey, at::ones_like(range), range);
  // Hue in sixths: the position between the two other channels around the largest one.
  at::Tensor h = at::where(maxc.eq(r), (g - b) / div,
                           at::where(maxc.eq(g), 2.0 + (b - r) / div, 4.0 + (r - g) / div));
  h = at::where(grey, at::zeros_like(h), h).div_(6.0).add_(shift);
  h = h - h.floor();  // wrap to [0, 1)
  const at::Tensor h6 = h * 6.0;
  const at::Tensor sector = h6.floor().remainder(6.0);
  const at::Tensor f = h6 - h6.floor();
  const at::Tensor& v = maxc;
  const at::Tensor p = (v * (1.0 - s)).clamp_(0, 1);
  const at::Tensor q = (v * (1.0 - s * f)).clamp_(0, 1);
  const at::Tensor t = (v * (1.0 - s * (1.0 - f))).clamp_(0, 1);
  // Sector k of the colour wheel picks (R, G, B) from (v, t, p, q) as in the table below.
  auto pick = [&](const at::Tensor& a0, const at::Tensor& a1, const at::Tensor& a2,
                  const at::Tensor& a3, const at::Tensor& a4, const at::Tensor& a5) {
    return at::where(
        sector.eq(0), a0,
        at::where(sector.eq(1), a1,
                  at::where(sector.eq(2), a2,
                            at::where(sector.eq(3), a3, at::where(sector.eq(4), a4, a5)))));
  };
  return at::stack({pick(v, q, p, p, t, v), pick(t, v, v, q, p, p), pick(p, p, t, v, v, q)});
}

at::Tensor adjust_hue(const at::Tensor& image, double shift) {
  if (image.size(0) != 3) return image;
  if (image.is_floating_point())
    return shift_hue(image.to(at::kFloat), shift).to(image.scalar_type());
  return shift_hue(image.to(at::kFloat).div(255.0), shift).mul_(255.0).to(at::kByte);
}

at::Tensor jitter_one(const at::Tensor& image, uint64_t key, double brightness, double contrast,
                      double saturation, double hue) {
  KeyedDraws draws(key);
  int order[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; --i) std::swap(order[i], order[draws.below(i + 1)]);
  const double b = draws.uniform(std::max(0.0, 1 - brightness), 1 + brightness);
  const double c = draws.uniform(std::max(0.0, 1 - contrast), 1 + contrast);
  const double s = draws.uniform(std::max(0.0, 1 - saturation), 1 + saturation);
  const double h = draws.uniform(-hue, hue);
  at::Tensor out = image;
  for (int op : order) {
    if (op == 0 && brightness > 0) out = blend(out, at::zeros_like(out), b);
    if (op == 1 && contrast > 0) out = adjust_contrast(out, c);
    if (op == 2 && saturation > 0 && out.size(0) == 3) out = blend(out, grey_of(out), s);
    if (op == 3 && hue > 0) out = adjust_hue(out, h);
  }
  return out.contiguous();
}

// normalize of a contiguous uint8 image or batch in one pass: the operations of ToTensor and
// Normalize in their order (x / 255, - mean, / std) in float32, so the values are theirs.
at::Tensor normalize_bytes(const at::Tensor& images, const std::vector<double>& mean,
                           const std::vector<double>& std) {
  at::Tensor out = at::empty(images.sizes(), images.options().dtype(at::kFloat));
  const int64_t channels = images.size(-3), plane = images.size(-2) * images.size(-1);
  const int64_t planes = images.numel() / plane;
  const uint8_t* in = images.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  for (int64_t p = 0; p < planes; ++p) {
    const size_t c = mean.size() == 1 ? 0 : static_cast<size_t>(p % channels);
    const float m = static_cast<float>(mean[c]), sd = static_cast<float>(std[c]);
    const uint8_t* src = in + p * plane;
    float* dst = o + p * plane;
    for (int64_t i = 0; i < plane; ++i) dst[i] = (static_cast<float>(src[i]) / 255.0f - m) / sd;
  }
  return out;
}

}  // namespace

// ---- tensor functions ----

at::Tensor resize_images(const at::Tensor& images, int64_t height, int64_t width) {
  check_images(images, "resize");
  check_size("resize", "height", height);
  check_size("resize", "width", width);
  return for_each_row(
      images, [&](const at::Tensor& one, int64_t) { return resize_image(one, height, width); });
}

at::Tensor resize_shorter_side_images(const at::Tensor& images, int64_t size) {
  check_images(images, "resize_shorter_side");
  check_size("resize_shorter_side", "size", size);
  const int64_t h = images.size(-2), w = images.size(-1);
  const int64_t new_h = h <= w ? size : size * h / w, new_w = h <= w ? size * w / h : size;
  DIST_CHECK_ARG(new_h >= 1 && new_w >= 1 && new_h <= kMaxImagePixels / new_w,
                 "resize_shorter_side: resizing the ", h, "x", w, " image to a shorter side of ",
                 size, " gives ", new_h, "x", new_w, ", outside 1 to kMaxImagePixels pixels");
  return for_each_row(
      images, [&](const at::Tensor& one, int64_t) { return resize_image(one, new_h, new_w); });
}

at::Tensor center_crop_images(const at::Tensor& images, int64_t height, int64_t width) {
  check_images(images, "center_crop");
  check_size("center_crop", "height", height);
  check_size("center_crop", "width", width);
  return center_crop_one(images, height, width);
}

at::Tensor resize_and_center_crop_images(const at::Tensor& images, int64_t height, int64_t width) {
  check_images(images, "resize_and_center_crop");
  check_size("resize_and_center_crop", "height", height);
  check_size("resize_and_center_crop", "width", width);
  const auto [new_h, new_w] = covering_size(images.size(-2), images.size(-1), height, width);
  DIST_CHECK_ARG(new_h <= kMaxImagePixels / new_w, "resize_and_center_crop: the ", images.size(-2),
                 "x", images.size(-1), " image would be resized to ", new_h, "x", new_w,
                 " to cover ", height, "x", width, ", more than kMaxImagePixels pixels");
  return for_each_row(images, [&](const at::Tensor& one, int64_t) {
    return center_crop_one(resize_image(one, new_h, new_w), height, width);
  });
}

at::Tensor scale_images(const at::Tensor& bytes) { return bytes.to(at::kFloat).div_(255.0); }

Element scale_images_of(Element element) {
  DIST_CHECK_ARG(!element.empty() && element[0].scalar_type() == at::kByte,
                 "scale_images_of: the element's first tensor must hold uint8 images (from "
                 "fashion_mnist_bytes), got ",
                 element.empty() ? std::string("no tensors") : toString(element[0].scalar_type()));
  element[0] = scale_images(element[0]);
  return element;
}

at::Tensor normalize_images(const at::Tensor& images, const std::vector<double>& mean,
                            const std::vector<double>& std) {
  DIST_CHECK_ARG(!mean.empty() && mean.size() == std.size(),
                 "normalize: needs one mean and one std per channel, got ", mean.size(),
                 " means and ", std.size(),
                 " stds; for ImageNet's RGB statistics pass "
                 "kImageNetMean and kImageNetStd");
  for (size_t c = 0; c < mean.size(); ++c)
    DIST_CHECK_ARG(std::isfinite(mean[c]) && std::isfinite(std[c]) && std[c] > 0,
                   "normalize: channel ", c,
                   " needs a finite mean and a finite positive std, got "
                   "mean ",
                   mean[c], " and std ", std[c]);
  DIST_CHECK_ARG(images.defined() && (images.dim() == 3 || images.dim() == 4),
                 "normalize: needs an image [C, H, W] or a batch of images [N, C, H, W], got "
                 "shape ",
                 images.defined() ? images.sizes() : at::IntArrayRef{});
  const int64_t channels = images.size(-3);
  DIST_CHECK_ARG(mean.size() == 1 || static_cast<int64_t>(mean.size()) == channels,
                 "normalize: ", mean.size(), " means and stds for an image of ", channels,
                 " channels (shape ", images.sizes(), "); give one value per channel",
                 channels == 1 ? " (a grey image: e.g. the mean of the RGB values)"
                               : " (decode to RGB with DecodeImageOptions::channels = 3?)");
  if (images.scalar_type() == at::kByte) return normalize_bytes(images.contiguous(), mean, std);
  const at::Tensor x = images.to(at::kFloat);
  const auto shape = std::vector<int64_t>{static_cast<int64_t>(mean.size()), 1, 1};
  const at::Tensor m = at::tensor(mean, at::kDouble).to(at::kFloat).view(shape);
  const at::Tensor s = at::tensor(std, at::kDouble).to(at::kFloat).view(shape);
  return x.sub(m).div_(s);
}

CropBox random_resized_crop_box(uint64_t key, int64_t image_height, int64_t image_width,
                                std::array<double, 2> scale, std::array<double, 2> ratio) {
  check_scale_ratio("random_resized_crop", scale, ratio);
  DIST_CHECK_ARG(image_height >= 1 && image_width >= 1,
                 "random_resized_crop: the image has no pixels (", image_height, "x", image_width,
                 ")");
  KeyedDraws draws(key);
  const double area = static_cast<double>(image_height) * static_cast<double>(image_width);
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * draws.uniform(scale[0], scale[1]);
    const double aspect = std::exp(draws.uniform(log_lo, log_hi));
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (w > 0 && w <= image_width && h > 0 && h <= image_height) {
      const int64_t top = draws.below(image_height - h + 1);
      return {top, draws.below(image_width - w + 1), h, w};
    }
  }
  // No attempt fit: the whole image, cut to the nearest allowed aspect ratio, centred.
  const double in_ratio = static_cast<double>(image_width) / static_cast<double>(image_height);
  int64_t w = image_width, h = image_height;
  if (in_ratio < ratio[0]) {
    h = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(w / ratio[0])));
  } else if (in_ratio > ratio[1]) {
    w = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(h * ratio[1])));
  }
  return {(image_height - h) / 2, (image_width - w) / 2, h, w};
}

// ---- transforms ----

ElementTransform resize(int64_t height, int64_t width, size_t component) {
  check_size("resize", "height", height);
  check_size("resize", "width", width);
  return on_component("resize", component,
                      [=](const at::Tensor& x) { return resize_images(x, height, width); });
}

ElementTransform resize_shorter_side(int64_t size, size_t component) {
  check_size("resize_shorter_side", "size", size);
  return on_component("resize_shorter_side", component,
                      [=](const at::Tensor& x) { return resize_shorter_side_images(x, size); });
}

ElementTransform center_crop(int64_t height, int64_t width, size_t component) {
  check_size("center_crop", "height", height);
  check_size("center_crop", "width", width);
  return on_component("center_crop", component,
                      [=](const at::Tensor& x) { return center_crop_images(x, height, width); });
}

ElementTransform resize_and_center_crop(int64_t height, int64_t width, size_t component) {
  check_size("resize_and_center_crop", "height", height);
  check_size("resize_and_center_crop", "width", width);
  return on_component("resize_and_center_crop", component, [=](const at::Tensor& x) {
    return resize_and_center_crop_images(x, height, width);
  });
}

ElementTransform random_resized_crop(uint64_t seed, int64_t height, int64_t width,
                                     std::array<double, 2> scale, std::array<double, 2> ratio,
                                     size_t component) {
  check_size("random_resized_crop", "height", height);
  check_size("random_resized_crop", "width", width);
  check_scale_ratio("random_resized_crop", scale, ratio);
  return [=](Element element, const ElementContext& context) {
    const at::Tensor& images = image_of(element, component, "random_resized_crop");
    check_images(images, "random_resized_crop");
    element[component] = for_each_row(images, [&](const at::Tensor& one, int64_t row) {
      const CropBox box = random_resized_crop_box(augment_key(seed, kResizedCropSalt, context, row),
                                                  one.size(1), one.size(2), scale, ratio);
      // The crop is a view: resize_image reads it in place.
      return resize_image(one.narrow(1, box.top, box.height).narrow(2, box.left, box.width), height,
                          width);
    });
    return element;
  };
}

ElementTransform random_flip_up_down(uint64_t seed, size_t component) {
  return [=](Element element, const ElementContext& context) {
    const at::Tensor& images = image_of(element, component, "random_flip_up_down");
    element[component] = for_each_row(images, [&](const at::Tensor& one, int64_t row) {
      const bool flip = (augment_key(seed, kFlipUpDownSalt, context, row) >> 63) != 0;
      return flip ? at::flip(one, {-2}) : one;
    });
    return element;
  };
}

ElementTransform normalize(std::vector<double> mean, std::vector<double> std, size_t component) {
  // Check the values now (on an empty image of the right channel count).
  normalize_images(at::zeros({static_cast<int64_t>(mean.empty() ? 1 : mean.size()), 1, 1}), mean,
                   std);
  return on_component("normalize", component,
                      [mean = std::move(mean), std = std::move(std)](const at::Tensor& x) {
                        return normalize_images(x, mean, std);
                      });
}

ElementTransform color_jitter(uint64_t seed, double brightness, double contrast, double saturation,
                              double hue, size_t component) {
  for (auto [name, value] : {std::pair<const char*, double>{"brightness", brightness},
                             {"contrast", contrast},
                             {"saturation", saturation}})
    DIST_CHECK_ARG(std::isfinite(value) && value >= 0, "color_jitter: ", name,
                   " must be a finite value >= 0 (factors are drawn from [max(0, 1 - v), 1 + v]),"
                   " got ",
                   value);
  DIST_CHECK_ARG(std::isfinite(hue) && hue >= 0 && hue <= 0.5,
                 "color_jitter: hue must be 0 to 0.5 (a shift drawn from [-hue, hue] of the "
                 "colour wheel), got ",
                 hue);
  return [=](Element element, const ElementContext& context) {
    const at::Tensor& images = image_of(element, component, "color_jitter");
    check_images(images, "color_jitter");
    const int64_t channels = images.size(-3);
    DIST_CHECK_ARG(channels == 1 || channels == 3,
                   "color_jitter: needs grey (1 channel) or RGB "
                   "(3 channels) images, got ",
                   channels, " channels (shape ", images.sizes(), ")");
    element[component] = for_each_row(images, [&](const at::Tensor& one, int64_t row) {
      return jitter_one(one, augment_key(seed, kColorJitterSalt, context, row), brightness,
                        contrast, saturation, hue);
    });
    return element;
  };
}

}  // namespace dist::data
