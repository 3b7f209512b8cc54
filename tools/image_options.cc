#include "image_options.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include <CLI/CLI.hpp>

#include "dist/core/error.h"

namespace dist::tools {
namespace {

// The comma-separated parts of `text` ("" gives none).
std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (text.back() == separator) parts.emplace_back();
  return parts;
}

int64_t parse_side(const std::string& text, const std::string& whole) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  DIST_CHECK_ARG(!text.empty() && *end == '\0' && value >= 1 && value <= 16384, "--image-size '",
                 whole,
                 "' is not a size: give HEIGHTxWIDTH in pixels (1 to 16384 each), e.g. "
                 "--image-size 64x64, or one number for a square");
  return value;
}

std::vector<double> parse_values(const std::string& text, const std::string& whole, bool positive) {
  std::vector<double> values;
  for (const std::string& part : split(text, ',')) {
    char* end = nullptr;
    const double value = std::strtod(part.c_str(), &end);
    DIST_CHECK_ARG(
        !part.empty() && *end == '\0' && std::isfinite(value) && (!positive || value > 0),
        "--normalize '", whole, "': '", part, "' is not a ",
        positive ? "positive number (a standard deviation)" : "number (a mean)",
        "; give MEANS/STDS with one value per channel, e.g. "
        "--normalize 0.485,0.456,0.406/0.229,0.224,0.225, or --normalize imagenet");
    values.push_back(value);
  }
  return values;
}

std::string joined(const std::vector<double>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

}  // namespace

void add_image_flags(CLI::App& app, ImageOptions& o, ImageFlagTexts& t) {
  app.add_option("--channels", o.channels,
                 "decode images to 1 (grey) or 3 (RGB) channels (grey, RGB, RGBA, palette, CMYK "
                 "and 16-bit images are all converted); default: what --model-file takes, else "
                 "the first training image's")
      ->check(CLI::IsMember({1, 3}));
  app.add_option("--image-size", t.image_size,
                 "bring every image to HEIGHTxWIDTH (e.g. 64x64), so that images of mixed sizes "
                 "batch; default: the first image's size, which every image must have");
  app.add_option("--resize-policy", t.resize_policy,
                 "with --image-size: resize (antialiased bilinear, as torchvision's Resize) | "
                 "crop (the shorter side resized, then the centre cropped: the aspect kept)")
      ->capture_default_str();
  app.add_option("--num-classes", o.num_classes,
                 "the classes to tell apart (default: from the data: an image folder's class "
                 "folders, the largest TFRecord label + 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--augment", t.augment,
                 "random augmentation of the training images, a comma list: flip (left to "
                 "right) and crop (a random resized crop to --image-size, torchvision's "
                 "RandomResizedCrop); each a function of (--seed, epoch, example), so any "
                 "number of workers sees one device's batches");
  app.add_option("--normalize", t.normalize,
                 "subtract a mean and divide by a standard deviation per channel, after scaling "
                 "to [0, 1]: MEANS/STDS with one value per channel (e.g. "
                 "0.485,0.456,0.406/0.229,0.224,0.225) or imagenet (those values)");
}

void finish_image_options(ImageOptions& o, const ImageFlagTexts& t) {
  if (!t.image_size.empty()) {
    const auto x = t.image_size.find_first_of("xX");
    o.height = parse_side(t.image_size.substr(0, x), t.image_size);
    o.width =
        x == std::string::npos ? o.height : parse_side(t.image_size.substr(x + 1), t.image_size);
  }
  DIST_CHECK_ARG(t.resize_policy == "resize" || t.resize_policy == "crop",
                 "unknown --resize-policy '", t.resize_policy, "': use resize or crop");
  o.resize_policy = t.resize_policy == "crop" ? ResizePolicy::kCrop : ResizePolicy::kResize;
  for (const std::string& part : split(t.augment, ',')) {
    DIST_CHECK_ARG(part == "flip" || part == "crop", "unknown --augment '", part,
                   "': give a comma list of flip and crop, e.g. --augment flip,crop");
    (part == "flip" ? o.flip : o.crop) = true;
  }
  if (t.normalize == "imagenet") {
    o.mean = {0.485, 0.456, 0.406};
    o.std = {0.229, 0.224, 0.225};
  } else if (!t.normalize.empty()) {
    const auto slash = t.normalize.find('/');
    DIST_CHECK_ARG(slash != std::string::npos, "--normalize '", t.normalize,
                   "' has no '/': give MEANS/STDS with one value per channel, e.g. "
                   "0.485,0.456,0.406/0.229,0.224,0.225, or imagenet");
    o.mean = parse_values(t.normalize.substr(0, slash), t.normalize, false);
    o.std = parse_values(t.normalize.substr(slash + 1), t.normalize, true);
    DIST_CHECK_ARG(o.mean.size() == o.std.size() && (o.mean.size() == 1 || o.mean.size() == 3),
                   "--normalize '", t.normalize, "' gives ", o.mean.size(), " means and ",
                   o.std.size(), " standard deviations: give one of each per channel (1 or 3)");
  }
}

std::string augment_spelling(const ImageOptions& o) {
  if (o.flip && o.crop) return "flip,crop";
  return o.flip ? "flip" : o.crop ? "crop" : "";
}

std::string normalize_spelling(const ImageOptions& o) {
  return o.normalized() ? joined(o.mean) + "/" + joined(o.std) : "";
}

}  // namespace dist::tools
