// A pack's chunk in 16 bits per value (gradient_compression.h): bfloat16 as it is, float16
// times a power of two 2^e chosen so that the chunk's largest magnitude stays within float16's
// range. The encoding is bytes: the values, then e as an int16 (0 for bfloat16).
#pragma once

#include <ATen/core/Tensor.h>

namespace dist::compression {

enum class HalfKind { kBFloat16, kFloat16 };

// The exponent e for `values` (float) in float16: the largest with max|values| x 2^e <= 65504
// (within [-120, 120]); 0 when every value is 0 or one is not finite.
int float16_exponent(const at::Tensor& values);
// 2 x (n + 1) bytes for n float values.
at::Tensor encode(const at::Tensor& values, HalfKind kind);
// encode into `bytes` (kByte, encoded_bytes(n) elements): a buffer kept from step to step.
void encode_into(const at::Tensor& values, HalfKind kind, const at::Tensor& bytes);
// Writes the n values of `bytes` (from encode) into `out` (float, n elements).
void decode(const at::Tensor& bytes, HalfKind kind, at::Tensor& out);
// sum += the n values of `bytes`, bit for bit as decode and then an addition (no copy).
void decode_add(const at::Tensor& bytes, HalfKind kind, at::Tensor& sum);
// Bytes an encoding of n values takes.
inline int64_t encoded_bytes(int64_t n) { return 2 * (n + 1); }

}  // namespace dist::compression
