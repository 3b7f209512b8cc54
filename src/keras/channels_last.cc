#include "keras/channels_last.h"

#include <ATen/ATen.h>

namespace dist::keras::detail {

at::Tensor to_channels_last(const at::Tensor& x) {
  if (x.dim() != 4) return x;
  if (x.size(1) != 1) return x.contiguous(at::MemoryFormat::ChannelsLast);
  // With one channel the NCHW and NHWC orders are the same bytes, and contiguous() keeps the
  // NCHW strides, from which LibTorch infers NCHW for the layer's output. Restride the same
  // memory so that the first convolution sees (and produces) channels-last.
  const at::Tensor c = x.contiguous();
  const int64_t h = c.size(2), w = c.size(3);
  return c.as_strided(c.sizes(), {h * w, 1, w, 1}, c.storage_offset());
}

}  // namespace dist::keras::detail
