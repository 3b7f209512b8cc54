// The random streams of the data pipeline: a function of (seed, epoch) only, the same on every
// platform and compiler (std::mt19937_64's output is fixed by the standard; slot choice is a
// multiply-shift, not std::uniform_int_distribution, whose output is implementation-defined).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace dist::data::detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The stream for one epoch of a stage seeded with `seed`.
inline std::mt19937_64 epoch_stream(uint64_t seed, uint64_t epoch) {
  return std::mt19937_64(splitmix64(seed ^ splitmix64(epoch)));
}

// A value in [0, n), n >= 1.
inline size_t uniform_below(std::mt19937_64& rng, size_t n) {
  return static_cast<size_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
}

// 0..n-1 in an order given by the stream (Fisher-Yates).
inline std::vector<size_t> permutation(size_t n, std::mt19937_64& rng) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[uniform_below(rng, i)]);
  return order;
}

}  // namespace dist::data::detail
