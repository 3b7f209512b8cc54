#include "distribute/compression/half_codec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace dist::compression {
namespace {

constexpr float kFloat16Max = 65504.0f;

at::ScalarType dtype_of(HalfKind kind) {
  return kind == HalfKind::kBFloat16 ? at::kBFloat16 : at::kHalf;
}

}  // namespace

int float16_exponent(const at::Tensor& values) {
  if (values.numel() == 0) return 0;
  const float largest = values.abs().max().item<float>();
  if (largest == 0.0f || !std::isfinite(largest)) return 0;
  int exponent_of_largest = 0;
  std::frexp(largest, &exponent_of_largest);  // largest = f x 2^k, f in [0.5, 1)
  int e = 16 - exponent_of_largest;           // f x 2^16 < 65536: one step too far at most
  if (std::ldexp(largest, e) > kFloat16Max) --e;
  return std::clamp(e, -120, 120);
}

at::Tensor encode(const at::Tensor& values, HalfKind kind) {
  const int64_t n = values.numel();
  at::Tensor bytes = at::empty({encoded_bytes(n)}, at::kByte);
  const int e = kind == HalfKind::kFloat16 ? float16_exponent(values) : 0;
  // A power of two scales exactly: the only rounding is to 16 bits.
  at::Tensor scaled = e == 0 ? values : values * std::ldexp(1.0f, e);
  bytes.view(dtype_of(kind)).narrow(0, 0, n).copy_(scaled.reshape(-1));
  bytes.view(at::kShort).narrow(0, n, 1).fill_(e);
  return bytes;
}

void decode(const at::Tensor& bytes, HalfKind kind, at::Tensor& out) {
  const int64_t n = bytes.numel() / 2 - 1;
  out.copy_(bytes.view(dtype_of(kind)).narrow(0, 0, n).view(out.sizes()));
  const int e = bytes.view(at::kShort)[n].item<int16_t>();
  if (e != 0) out.mul_(std::ldexp(1.0f, -e));
}

}  // namespace dist::compression
