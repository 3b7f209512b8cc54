// The antialiased bilinear resampler (see resize_image in include/dist/data/image_codec.h).
//
// Resampling one axis from `in` to `out` samples: output i is centred at input coordinate
// c = (i + 0.5) * s, s = in / out. A triangle filter widened to half-width r = max(s, 1)
// weighs input sample j (centred at j + 0.5) by max(0, 1 - |j + 0.5 - c| / r); the weights of
// one output are divided by their sum, so samples cut off by the edge leave the others
// normalised. When downscaling (s > 1) every input sample contributes to about 2s outputs,
// the box-like average that keeps a downscaled image free of aliasing; when upscaling r = 1
// and the filter is linear interpolation between the two nearest samples.
//
// The two axes are separable: a horizontal pass resizes each needed row to the new width,
// then a vertical pass combines rows. Only the rows the vertical pass reads go through the
// horizontal pass. For uint8 the weights are fixed point (kPrecisionBits fractional bits) and
// each pass rounds to the nearest integer and clamps to 0..255 into a uint8 buffer, which is
// what PIL computes; float32 accumulates in float without rounding.
#include "data/images/image_resize_antialias.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace dist::data::detail {
namespace {

// The row loops are compiled twice, for the baseline x86-64 and for AVX2 (chosen at load time):
// SSE2 has no 32-bit multiply, so only the AVX2 copy vectorises the fixed-point passes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DIST_RESAMPLE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DIST_RESAMPLE_CLONES
#endif

// 22 fractional bits leave room for 255 times a weight sum of 1 plus rounding in an int32.
constexpr int kPrecisionBits = 22;

// The precomputed filter of one axis: output i reads count[i] inputs from first[i], with
// weights w[i * taps + k] (float) and fixed[i * taps + k] (fixed point).
struct AxisFilter {
  int64_t taps = 0;
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<float> w;
  std::vector<int32_t> fixed;
};

AxisFilter axis_filter(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double radius = std::max(scale, 1.0);
  AxisFilter f;
  f.taps = static_cast<int64_t>(std::ceil(radius)) * 2 + 1;
  f.first.resize(static_cast<size_t>(out));
  f.count.resize(static_cast<size_t>(out));
  f.w.assign(static_cast<size_t>(out * f.taps), 0.0f);
  f.fixed.assign(static_cast<size_t>(out * f.taps), 0);
  std::vector<double> weights(static_cast<size_t>(f.taps));
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    // Inputs whose centres lie within the radius: j + 0.5 in (centre - r, centre + r).
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(centre - radius + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(centre + radius + 0.5), in);
    const int64_t n = std::min<int64_t>(hi - lo, f.taps);
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double d = std::abs(static_cast<double>(lo + k) + 0.5 - centre) / radius;
      weights[static_cast<size_t>(k)] = d < 1 ? 1 - d : 0;
      sum += weights[static_cast<size_t>(k)];
    }
    f.first[static_cast<size_t>(i)] = lo;
    f.count[static_cast<size_t>(i)] = n;
    for (int64_t k = 0; k < n; ++k) {
      const double normalised = sum > 0 ? weights[static_cast<size_t>(k)] / sum : 0;
      const size_t at = static_cast<size_t>(i * f.taps + k);
      f.w[at] = static_cast<float>(normalised);
      f.fixed[at] = static_cast<int32_t>(normalised * (1 << kPrecisionBits) + 0.5);
    }
  }
  return f;
}

inline uint8_t clamp_to_byte(int32_t accumulated) {
  const int32_t v = accumulated >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// kBlock rows of the horizontal pass at once: the rows' pixels are interleaved (column x of
// row r at columns[x * kBlock + r]) so that each filter tap is one multiply-add of kBlock
// lanes, which the compiler vectorises; a filter window is irregular along a row, not across
// rows.
constexpr int64_t kBlock = 8;

void interleave_rows(const uint8_t* src, int64_t row_stride, int64_t step, int64_t in,
                     int32_t* columns) {
  for (int64_t r = 0; r < kBlock; ++r) {
    const uint8_t* row = src + r * row_stride;
    for (int64_t x = 0; x < in; ++x) columns[x * kBlock + r] = row[x * step];
  }
}

void horizontal_block(const int32_t* columns, const AxisFilter& f, int64_t out, uint8_t* dst,
                      int64_t dst_stride) {
  for (int64_t x = 0; x < out; ++x) {
    int32_t acc[kBlock];
    for (int64_t r = 0; r < kBlock; ++r) acc[r] = 1 << (kPrecisionBits - 1);
    const int32_t* k = f.fixed.data() + x * f.taps;
    const int32_t* column = columns + f.first[static_cast<size_t>(x)] * kBlock;
    const int64_t n = f.count[static_cast<size_t>(x)];
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < kBlock; ++r) acc[r] += column[t * kBlock + r] * k[t];
    for (int64_t r = 0; r < kBlock; ++r) dst[r * dst_stride + x] = clamp_to_byte(acc[r]);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same with AVX2: one 8-lane multiply-add per tap.
__attribute__((target("avx2"))) void horizontal_block_avx2(const int32_t* columns,
                                                           const AxisFilter& f, int64_t out,
                                                           uint8_t* dst, int64_t dst_stride) {
  const __m256i bias = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  const __m256i zero = _mm256_setzero_si256(), top = _mm256_set1_epi32(255);
  alignas(32) int32_t lanes[kBlock];
  for (int64_t x = 0; x < out; ++x) {
    __m256i acc = bias;
    const int32_t* k = f.fixed.data() + x * f.taps;
    const int32_t* column = columns + f.first[static_cast<size_t>(x)] * kBlock;
    const int64_t n = f.count[static_cast<size_t>(x)];
    for (int64_t t = 0; t < n; ++t) {
      const __m256i pixels =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(column + t * kBlock));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(pixels, _mm256_set1_epi32(k[t])));
    }
    acc = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(acc, kPrecisionBits), zero), top);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    for (int64_t r = 0; r < kBlock; ++r) dst[r * dst_stride + x] = static_cast<uint8_t>(lanes[r]);
  }
}
bool have_avx2() {
  // Function-local: __builtin_cpu_supports needs __builtin_cpu_init before constructors ran.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}
#else
constexpr bool have_avx2() { return false; }
#endif

// One output row of the horizontal pass: src[x * step] for the input columns.
DIST_RESAMPLE_CLONES void horizontal_row(const uint8_t* src, int64_t step, const AxisFilter& f,
                                         int64_t out, uint8_t* dst) {
  for (int64_t x = 0; x < out; ++x) {
    const uint8_t* p = src + f.first[static_cast<size_t>(x)] * step;
    const int32_t* k = f.fixed.data() + x * f.taps;
    int32_t acc = 1 << (kPrecisionBits - 1);
    const int64_t n = f.count[static_cast<size_t>(x)];
    for (int64_t t = 0; t < n; ++t) acc += static_cast<int32_t>(p[t * step]) * k[t];
    dst[x] = clamp_to_byte(acc);
  }
}

DIST_RESAMPLE_CLONES void horizontal_row(const float* src, int64_t step, const AxisFilter& f,
                                         int64_t out, float* dst) {
  for (int64_t x = 0; x < out; ++x) {
    const float* p = src + f.first[static_cast<size_t>(x)] * step;
    const float* k = f.w.data() + x * f.taps;
    float acc = 0;
    const int64_t n = f.count[static_cast<size_t>(x)];
    for (int64_t t = 0; t < n; ++t) acc += p[t * step] * k[t];
    dst[x] = acc;
  }
}

// One output row of the vertical pass over contiguous rows `rows[r]` of `width` values.
DIST_RESAMPLE_CLONES void vertical_row(const uint8_t* rows, int64_t row_stride, int64_t first,
                                       int64_t n, const int32_t* k, int64_t width, int32_t* acc,
                                       uint8_t* dst) {
  std::fill(acc, acc + width, 1 << (kPrecisionBits - 1));
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* row = rows + (first + t) * row_stride;
    const int32_t weight = k[t];
    for (int64_t x = 0; x < width; ++x) acc[x] += static_cast<int32_t>(row[x]) * weight;
  }
  for (int64_t x = 0; x < width; ++x) dst[x] = clamp_to_byte(acc[x]);
}

DIST_RESAMPLE_CLONES void vertical_row(const float* rows, int64_t row_stride, int64_t first,
                                       int64_t n, const float* k, int64_t width, float* /*acc*/,
                                       float* dst) {
  std::fill(dst, dst + width, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = rows + (first + t) * row_stride;
    const float weight = k[t];
    for (int64_t x = 0; x < width; ++x) dst[x] += row[x] * weight;
  }
}

// The horizontal pass over `rows` rows into rows of `out` values at dst.
void horizontal_pass(const uint8_t* src, int64_t row_stride, int64_t step, int64_t in,
                     const AxisFilter& f, int64_t out, int64_t rows, uint8_t* dst,
                     std::vector<int32_t>& columns) {
  columns.resize(static_cast<size_t>(in * kBlock));
  int64_t y = 0;
  for (; y + kBlock <= rows; y += kBlock) {
    interleave_rows(src + y * row_stride, row_stride, step, in, columns.data());
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_avx2()) {
      horizontal_block_avx2(columns.data(), f, out, dst + y * out, out);
      continue;
    }
#endif
    horizontal_block(columns.data(), f, out, dst + y * out, out);
  }
  for (; y < rows; ++y) horizontal_row(src + y * row_stride, step, f, out, dst + y * out);
}

void horizontal_pass(const float* src, int64_t row_stride, int64_t step, int64_t /*in*/,
                     const AxisFilter& f, int64_t out, int64_t rows, float* dst,
                     std::vector<int32_t>& /*columns*/) {
  for (int64_t y = 0; y < rows; ++y)
    horizontal_row(src + y * row_stride, step, f, out, dst + y * out);
}

const int32_t* weights_of(const AxisFilter& f, int64_t i, const uint8_t*) {
  return f.fixed.data() + i * f.taps;
}
const float* weights_of(const AxisFilter& f, int64_t i, const float*) {
  return f.w.data() + i * f.taps;
}

template <typename T, typename Acc>
at::Tensor resize_typed(const at::Tensor& image, int64_t height, int64_t width) {
  const int64_t channels = image.size(0), in_h = image.size(1), in_w = image.size(2);
  const int64_t sc = image.stride(0), sy = image.stride(1), sx = image.stride(2);
  const T* src = image.data_ptr<T>();
  at::Tensor result = at::empty({channels, height, width}, image.options());
  T* dst = result.data_ptr<T>();
  const bool horizontal = width != in_w, vertical = height != in_h;

  AxisFilter fy;
  int64_t row_lo = 0, row_hi = in_h;  // the input rows the vertical pass reads
  if (vertical) {
    fy = axis_filter(in_h, height);
    row_lo = fy.first.front();
    row_hi = fy.first.back() + fy.count.back();
  }
  const int64_t rows = row_hi - row_lo;
  // The horizontal pass's output (or, without one, the input rows) as rows of `width`.
  std::vector<T> middle;
  std::vector<int32_t> columns;
  std::vector<Acc> acc(vertical ? static_cast<size_t>(width) : 0);
  AxisFilter fx;
  if (horizontal) {
    fx = axis_filter(in_w, width);
    middle.resize(static_cast<size_t>(rows * width));
  }
  for (int64_t c = 0; c < channels; ++c) {
    const T* plane = src + c * sc;
    T* out = dst + c * height * width;
    const T* mid = nullptr;
    int64_t mid_stride = 0;
    if (horizontal) {
      T* target = vertical ? middle.data() : out;
      horizontal_pass(plane + row_lo * sy, sy, sx, in_w, fx, width, rows, target, columns);
      mid = middle.data();
      mid_stride = width;
    } else if (sx == 1) {
      mid = plane + row_lo * sy;
      mid_stride = sy;
    } else {  // a strided view without a horizontal pass: gather the rows
      middle.resize(static_cast<size_t>(rows * width));
      for (int64_t y = 0; y < rows; ++y)
        for (int64_t x = 0; x < width; ++x)
          middle[static_cast<size_t>(y * width + x)] = plane[(row_lo + y) * sy + x * sx];
      mid = middle.data();
      mid_stride = width;
    }
    if (!vertical) {
      if (!horizontal)
        for (int64_t y = 0; y < height; ++y)
          std::copy(mid + y * mid_stride, mid + y * mid_stride + width, out + y * width);
      continue;
    }
    for (int64_t y = 0; y < height; ++y)
      vertical_row(mid, mid_stride, fy.first[static_cast<size_t>(y)] - row_lo,
                   fy.count[static_cast<size_t>(y)], weights_of(fy, y, src), width, acc.data(),
                   out + y * width);
  }
  return result;
}

}  // namespace

at::Tensor resize_antialiased(const at::Tensor& image, int64_t height, int64_t width) {
  if (image.scalar_type() == at::kByte) return resize_typed<uint8_t, int32_t>(image, height, width);
  if (image.scalar_type() == at::kFloat) return resize_typed<float, float>(image, height, width);
  return resize_typed<float, float>(image.to(at::kFloat), height, width).to(image.scalar_type());
}

}  // namespace dist::data::detail
