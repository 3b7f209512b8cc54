// What dist-train does to each image between decoding and batching, from the image flags
// (image_options.h): the channels, the size (resized or centre-cropped, or a random resized crop
// when training with --augment crop), the random flip, the scaling to [0, 1] and --normalize.
// Random choices are functions of (--seed, epoch, the example's place in the epoch), so that a
// job on any number of workers, resumed or resized, sees one device's images.
#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "dist/data/dataset.h"
#include "train_options.h"

namespace dist::tools {

struct ImagePreparation {
  int64_t channels = 1;           // every image converted to these
  int64_t height = 0, width = 0;  // and brought to this size
  bool any_size = false;          // --image-size given: other sizes are resized or cropped
  bool channels_chosen = false;   // --channels or the model's: other channel counts converted
  ResizePolicy policy = ResizePolicy::kResize;
  bool flip = false, crop = false;  // --augment (training only)
  std::vector<double> mean, std;    // --normalize (empty: none)
  uint64_t seed = 0;

  // `image`: uint8 [C, H, W] as decoded (C 1 or 3), to the float [channels, height, width] the
  // model takes. `training` applies --augment. DataError naming `source` for an image that
  // cannot be made so (another size without --image-size, another channel count when the
  // channels were taken from the first image).
  at::Tensor operator()(const at::Tensor& image, const data::ElementContext& context, bool training,
                        const std::string& source) const;
};

// The preparation the options ask for, for data whose first image is `first` (uint8 [C, H, W]
// as decoded) and a model that takes `model_channels` (0: unknown).
ImagePreparation image_preparation(const TrainOptions& options, const at::Tensor& first,
                                   int64_t model_channels);

// uint8 [C, H, W] to `channels` (1 or 3): grey replicated, RGB to grey by the ITU-R BT.601
// weights in libjpeg's fixed point (as image_codec.h's decoder does).
at::Tensor convert_channels(const at::Tensor& image, int64_t channels);

}  // namespace dist::tools
