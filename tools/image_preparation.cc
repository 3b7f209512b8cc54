#include "image_preparation.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"
#include "dist/data/augment.h"
#include "dist/data/image_transforms.h"
#include "dist/data/mnist.h"

namespace dist::tools {
namespace {

const char* channel_name(int64_t channels) { return channels == 1 ? "grey" : "RGB"; }

}  // namespace

at::Tensor convert_channels(const at::Tensor& image, int64_t channels) {
  if (image.size(0) == channels) return image;
  if (channels == 3) return image.expand({3, image.size(1), image.size(2)}).contiguous();
  // (19595 R + 38470 G + 7471 B + 32768) >> 16: libjpeg's and PIL's convert("L").
  const at::Tensor wide = image.to(at::kInt);
  const at::Tensor grey = (wide[0] * 19595 + wide[1] * 38470 + wide[2] * 7471 + 32768) / 65536;
  return grey.to(at::kByte).unsqueeze(0).contiguous();
}

at::Tensor ImagePreparation::operator()(const at::Tensor& decoded,
                                        const data::ElementContext& context, bool training,
                                        const std::string& source) const {
  DIST_CHECK(channels_chosen || decoded.size(0) == channels, DataError, source, ": the image is ",
             channel_name(decoded.size(0)), " but the data's first image is ",
             channel_name(channels),
             "; the data mixes grey and colour images: give --channels 1 or 3 to convert every "
             "image to one of them");
  at::Tensor image = convert_channels(decoded, channels);
  const bool same_size = image.size(1) == height && image.size(2) == width;
  DIST_CHECK(any_size || same_size, DataError, source, ": the image is ", image.size(1), "x",
             image.size(2), " but the data's first image is ", height, "x", width,
             "; give --image-size HxW to bring every image to one size (--resize-policy resize "
             "or crop)");
  if (training && crop) {
    image = data::random_resized_crop(seed, height, width)(data::Element{image}, context)[0];
  } else if (!same_size) {
    image = policy == ResizePolicy::kCrop
                ? data::resize_and_center_crop_images(image, height, width)
                : data::resize_images(image, height, width);
  }
  if (training && flip)
    image = data::random_flip_left_right(seed + 1)(data::Element{image}, context)[0];
  if (!mean.empty()) return data::normalize_images(image, mean, std);
  return data::scale_images(image);
}

ImagePreparation image_preparation(const TrainOptions& options, const at::Tensor& first,
                                   int64_t model_channels) {
  const ImageOptions& flags = options.images;
  ImagePreparation p;
  p.channels = flags.channels > 0   ? flags.channels
               : model_channels > 0 ? model_channels
                                    : first.size(0);
  p.channels_chosen = flags.channels > 0 || model_channels > 0;
  p.any_size = flags.sized();
  p.height = flags.sized() ? flags.height : first.size(1);
  p.width = flags.sized() ? flags.width : first.size(2);
  p.policy = flags.resize_policy;
  p.flip = flags.flip;
  p.crop = flags.crop;
  p.mean = flags.mean;
  p.std = flags.std;
  p.seed = options.seed;
  DIST_CHECK_ARG(
      p.mean.empty() || p.mean.size() == 1 || static_cast<int64_t>(p.mean.size()) == p.channels,
      "--normalize ", normalize_spelling(flags), " gives ", p.mean.size(),
      " values per statistic but the images have ", p.channels,
      " channels: give one mean and one standard deviation per channel");
  return p;
}

}  // namespace dist::tools
