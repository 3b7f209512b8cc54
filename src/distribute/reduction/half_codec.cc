#include "distribute/reduction/half_codec.h"

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
  const auto [lowest, highest] = at::aminmax(values);  // one pass, no copy
  const float largest = std::max(highest.item<float>(), -lowest.item<float>());
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
  at::Tensor halves = bytes.view(dtype_of(kind)).narrow(0, 0, n);
  // A power of two scales exactly: the only rounding is to 16 bits (computed in float32,
  // stored in 16 bits, in one pass).
  if (e == 0)
    halves.copy_(values.reshape(-1));
  else
    at::mul_out(halves, values.reshape(-1), at::scalar_tensor(std::ldexp(1.0f, e)));
  bytes.view(at::kShort).narrow(0, n, 1).fill_(e);
  return bytes;
}

void decode(const at::Tensor& bytes, HalfKind kind, at::Tensor& out) {
  const int64_t n = bytes.numel() / 2 - 1;
  out.copy_(bytes.view(dtype_of(kind)).narrow(0, 0, n).view(out.sizes()));
  const int e = bytes.view(at::kShort)[n].item<int16_t>();
  if (e != 0) out.mul_(std::ldexp(1.0f, -e));
}

void decode_add(const at::Tensor& bytes, HalfKind kind, at::Tensor& sum) {
  const int64_t n = bytes.numel() / 2 - 1;
  const int e = bytes.view(at::kShort)[n].item<int16_t>();
  // In float32: the 16-bit value times 2^-e is exact, so the one rounding is the addition's.
  sum.add_(bytes.view(dtype_of(kind)).narrow(0, 0, n).view(sum.sizes()), std::ldexp(1.0f, -e));
}

}  // namespace dist::compression
