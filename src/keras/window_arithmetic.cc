#include "keras/window_arithmetic.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace dist::keras::detail {

int64_t window_output(int64_t in, int64_t window, int64_t stride, const std::string& padding) {
  if (padding == "same") return (in + stride - 1) / stride;
  return in < window ? 0 : (in - window) / stride + 1;
}

std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t window, int64_t stride) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + window - in, 0);
  return {total / 2, total - total / 2};
}

at::Tensor pad_same(const at::Tensor& x, int64_t window, int64_t stride, double value) {
  auto [top, bottom] = same_padding(x.size(2), window, stride);
  auto [left, right] = same_padding(x.size(3), window, stride);
  if (top + bottom + left + right == 0) return x;
  return at::constant_pad_nd(x, {left, right, top, bottom}, value);
}

}  // namespace dist::keras::detail
