#include "distribute/reduction/half_codec.h"

#include <ATen/ATen.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dist::compression {
namespace {

constexpr float kFloat16Max = 65504.0f;

at::ScalarType dtype_of(HalfKind kind) {
  return kind == HalfKind::kBFloat16 ? at::kBFloat16 : at::kHalf;
}

// float16 through the CPU's F16C instructions: ATen 1.13 converts float to float16 element by
// element in software, four times slower than to bfloat16 (docs/hosts-scaling.md). Both round
// to nearest even and keep subnormals, so the bits are ATen's; the scaling by 2^e is exact, in
// float32 first, as ATen's multiply then conversion does it.
bool has_f16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}

__attribute__((target("avx,f16c"))) uint16_t to_half(float value) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(value), _MM_FROUND_TO_NEAREST_INT), 0));
}

__attribute__((target("avx,f16c"))) float from_half(uint16_t value) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(value)));
}

__attribute__((target("avx,f16c"))) void encode_f16c(const float* in, uint16_t* out, int64_t n,
                                                     float scale) {
  const __m256 factor = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(in + i), factor);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(scaled, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = to_half(in[i] * scale);
}

// out = half x scale, or out += half x scale (the product is exact: a 16-bit value times a
// power of two within float32's range).
__attribute__((target("avx,f16c"))) void decode_f16c(const uint16_t* in, float* out, int64_t n,
                                                     float scale, bool add) {
  const __m256 factor = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 value = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))), factor);
    _mm256_storeu_ps(out + i, add ? _mm256_add_ps(_mm256_loadu_ps(out + i), value) : value);
  }
  for (; i < n; ++i) out[i] = add ? out[i] + from_half(in[i]) * scale : from_half(in[i]) * scale;
}

// F16C applies: float16, float32 contiguous values, a CPU that has it.
bool use_f16c(HalfKind kind, const at::Tensor& floats) {
  return kind == HalfKind::kFloat16 && floats.scalar_type() == at::kFloat &&
         floats.is_contiguous() && has_f16c();
}

int16_t exponent_of(const at::Tensor& bytes, int64_t n) {
  return bytes.view(at::kShort)[n].item<int16_t>();
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

void encode_into(const at::Tensor& values, HalfKind kind, const at::Tensor& bytes) {
  const int64_t n = values.numel();
  const int e = kind == HalfKind::kFloat16 ? float16_exponent(values) : 0;
  at::Tensor halves = bytes.view(dtype_of(kind)).narrow(0, 0, n);
  const at::Tensor flat = values.reshape(-1);
  if (use_f16c(kind, flat)) {
    encode_f16c(flat.data_ptr<float>(), reinterpret_cast<uint16_t*>(halves.data_ptr()), n,
                std::ldexp(1.0f, e));
  } else if (e == 0) {
    halves.copy_(flat);
  } else {
    // A power of two scales exactly: the only rounding is to 16 bits (computed in float32,
    // stored in 16 bits, in one pass).
    at::mul_out(halves, flat, at::scalar_tensor(std::ldexp(1.0f, e)));
  }
  bytes.view(at::kShort).narrow(0, n, 1).fill_(e);
}

at::Tensor encode(const at::Tensor& values, HalfKind kind) {
  at::Tensor bytes = at::empty({encoded_bytes(values.numel())}, at::kByte);
  encode_into(values, kind, bytes);
  return bytes;
}

void decode(const at::Tensor& bytes, HalfKind kind, at::Tensor& out) {
  const int64_t n = bytes.numel() / 2 - 1;
  const int e = exponent_of(bytes, n);
  const at::Tensor halves = bytes.view(dtype_of(kind)).narrow(0, 0, n);
  if (use_f16c(kind, out)) {
    decode_f16c(reinterpret_cast<const uint16_t*>(halves.data_ptr()), out.data_ptr<float>(), n,
                std::ldexp(1.0f, -e), /*add=*/false);
    return;
  }
  out.copy_(halves.view(out.sizes()));
  if (e != 0) out.mul_(std::ldexp(1.0f, -e));
}

void decode_add(const at::Tensor& bytes, HalfKind kind, at::Tensor& sum) {
  const int64_t n = bytes.numel() / 2 - 1;
  const int e = exponent_of(bytes, n);
  const at::Tensor halves = bytes.view(dtype_of(kind)).narrow(0, 0, n);
  if (use_f16c(kind, sum)) {
    decode_f16c(reinterpret_cast<const uint16_t*>(halves.data_ptr()), sum.data_ptr<float>(), n,
                std::ldexp(1.0f, -e), /*add=*/true);
    return;
  }
  // In float32: the 16-bit value times 2^-e is exact, so the one rounding is the addition's.
  sum.add_(halves.view(sum.sizes()), std::ldexp(1.0f, -e));
}

}  // namespace dist::compression
