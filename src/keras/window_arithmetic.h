// TensorFlow's window arithmetic (convolutions and pooling, "valid" and "same" padding), shared
// by the Keras layers and the reference models (dist/models) that must compute as they do.
// Private to the library.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>

namespace dist::keras::detail {

// How many windows of `window` with `stride` an axis of `in` holds: "valid" keeps whole
// windows, "same" gives ceil(in / stride) (padding the shortfall, see same_padding).
int64_t window_output(int64_t in, int64_t window, int64_t stride, const std::string& padding);

// The padding before and after an axis of `in` for windows of `window` with `stride` so that
// the output has ceil(in / stride) places: the smaller half first, as TensorFlow pads.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t window, int64_t stride);

// [N, C, H, W] padded for "same" windows, filled with `value` (zero for convolutions, -inf
// for max pooling); `x` itself when nothing is needed.
at::Tensor pad_same(const at::Tensor& x, int64_t window, int64_t stride, double value);

}  // namespace dist::keras::detail
