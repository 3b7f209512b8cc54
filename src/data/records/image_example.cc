// ImageExampleParser: an image example's features parsed once, the image decoded or, for raw
// pixels (ImageFormat::kRaw), checked against its stored size and converted as decode_image
// converts.
#include "dist/data/image_example.h"

#include <ATen/ATen.h>

#include "data/images/image_codec_detail.h"
#include "dist/core/error.h"
#include "dist/data/files.h"

namespace dist::data {
namespace {

// The entries of the spec, in this order.
enum Feature { kImage, kLabel, kFormat, kChannels, kHeight, kWidth };

// "<source>: ", or nothing without a source.
std::string prefix(const std::string& source) { return source.empty() ? "" : source + ": "; }

int64_t scalar(const Element& parsed, Feature feature) { return parsed[feature].item<int64_t>(); }

}  // namespace

ImageExampleParser::ImageExampleParser(const ImageExampleFeatures& features)
    : spec_({
          FixedLenFeature(features.image, FeatureType::kBytes, {}),
          FixedLenFeature(features.label, FeatureType::kInt64, {}),
          // Absent in encoded examples (TensorFlow's name their format, or not at all): only
          // "raw" matters, and the sizes only then. 0 for a size is refused as a raw size.
          FixedLenFeature("image/format", FeatureType::kBytes, {}, string_tensor("")),
          FixedLenFeature("image/channels", FeatureType::kInt64, {},
                          at::scalar_tensor(1, at::kLong)),
          FixedLenFeature("image/height", FeatureType::kInt64, {}, at::scalar_tensor(0, at::kLong)),
          FixedLenFeature("image/width", FeatureType::kInt64, {}, at::scalar_tensor(0, at::kLong)),
      }) {}

Element ImageExampleParser::parse(std::string_view record, const DecodeImageOptions& options,
                                  const std::string& source) const {
  Element parsed;
  try {
    parsed = parse_example(record, spec_);
  } catch (const DataError& error) {
    throw DataError(prefix(source) + error.what());
  }
  const at::Tensor& bytes = parsed[kImage];
  const at::Tensor image =
      bytes_view(parsed[kFormat]) == "raw"
          ? raw_image(bytes, scalar(parsed, kChannels), scalar(parsed, kHeight),
                      scalar(parsed, kWidth), options, source)
          : decode_image(bytes, options, source);
  const auto& names = spec_.names();
  return Element({image, parsed[kLabel]},
                 Element::make_names({(*names)[kImage], (*names)[kLabel]}));
}

at::Tensor raw_image(const at::Tensor& bytes, int64_t channels, int64_t height, int64_t width,
                     const DecodeImageOptions& options, const std::string& source) {
  detail::check_decode_options(options);
  DIST_CHECK(channels == 1 || channels == 3, DataError, prefix(source), "a raw image of ", channels,
             " channels (image/channels); raw images have 1 (grey) or 3 (RGB)");
  DIST_CHECK(height > 0 && width > 0 && height <= kMaxImagePixels / width &&
                 bytes.numel() == channels * height * width,
             DataError, prefix(source), "a raw image of ", bytes.numel(),
             " bytes, but its image/channels, image/height and image/width say ", channels, "x",
             height, "x", width, "; the record is damaged or was not written as raw pixels");
  at::Tensor chw = bytes.reshape({channels, height, width});
  if (options.channels == 3 && channels == 1) chw = chw.expand({3, height, width});
  if (options.channels == 1 && channels == 3)
    chw = detail::grey_from_rgb(chw.permute({1, 2, 0}).contiguous()).view({1, height, width});
  if (options.height > 0 && (options.height != height || options.width != width))
    return resize_image(chw, options.height, options.width, options.antialias);
  return chw.contiguous();
}

}  // namespace dist::data
