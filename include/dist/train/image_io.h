// Images people can look at: tensors turned into 8-bit pixels, tiled into one grid and written
// as PNG files (or PNG bytes, which SummaryWriter::image puts in TensorBoard event files).
//
//   // A generator's tanh outputs [N,3,H,W] in [-1,1], beside the inputs, one pair per row:
//   auto pairs = torch::stack({inputs, outputs}, 1).flatten(0, 1);  // input, output, input, ...
//   auto grid = dist::image_grid(dist::to_uint8_image(pairs, -1, 1).unbind(0), /*columns=*/2);
//   dist::write_png("samples/epoch_3.png", grid);
//
// Images are channels first, as everywhere in the library: [H,W] (grey) or [C,H,W] with C = 1
// (grey), 3 (RGB) or 4 (RGBA). The writers take uint8 pixels only: a float tensor's range is a
// convention ([0,1] for sigmoid outputs, [-1,1] for tanh ones) that only the caller knows, so
// the mapping is explicit in to_uint8_image. PNG files are 8 bits per channel, not interlaced,
// sRGB (encoded by libpng). All functions are thread-safe (they share no state).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist/core/env.h"
#include "dist/data/image_codec.h"

namespace dist {

// Maps values linearly from [low, high] to 0..255, rounding to the nearest integer; values
// outside the range (and infinities) are clamped to 0 or 255, NaN becomes 0. Any shape and
// floating or integer dtype; returns a uint8 tensor of the same shape. InvalidArgument unless
// low < high (both finite).
at::Tensor to_uint8_image(const at::Tensor& values, double low = 0.0, double high = 1.0);

// Tiles same-shaped images ([C,H,W], or [H,W]) into one image of the same rank and dtype, in
// row-major order, `columns` per row (fewer if there are fewer images; the last row may be
// short, its empty places filled with `pad_value`). Every tile has a border of `padding` pixels
// of `pad_value` on each side, shared between neighbours, so the result is
// [C, rows * (H + padding) + padding, columns * (W + padding) + padding]: tile (r, c) starts at
// row padding + r * (H + padding), column padding + c * (W + padding). For a batch [N,C,H,W],
// pass batch.unbind(0). (No overload takes the batch tensor itself: image_grid({image}, n)
// would then silently read one [C,H,W] image as C grey ones.)
// InvalidArgument if `images` is empty, the shapes or dtypes differ, columns < 1, padding < 0,
// or pad_value is not a pixel value for uint8 images (0 to 255).
at::Tensor image_grid(const std::vector<at::Tensor>& images, int64_t columns, int64_t padding = 2,
                      double pad_value = 0.0);

// The PNG file's bytes for a uint8 image: data::encode_png (dist/data/image_codec.h, beside the
// decoders), named here too for the callers of image grids and summaries.
using data::encode_png;

// Writes encode_png(image) to `path` through `env` (not owned) atomically: a temporary file,
// synced, renamed over `path`, so a reader never sees half an image. The directory must exist.
// InvalidArgument as encode_png; DataError naming `path` if the file system fails.
void write_png(const std::string& path, const at::Tensor& image, Env* env = Env::Default());

}  // namespace dist
