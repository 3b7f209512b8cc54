// Times variants of the same work in interleaved rounds (A B A B ...), so that a noisy,
// shared machine slows all variants alike; reports the median seconds per iteration of each.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dist::bench {

struct Variant {
  std::string name;
  std::function<void()> iteration;  // one unit of work (e.g. one training step)
};

// Median over `rounds` of the mean time of `iterations` back-to-back calls, per variant.
inline std::vector<double> interleaved_medians(const std::vector<Variant>& variants, int rounds,
                                               int iterations, int warmup = 3) {
  for (const auto& v : variants)
    for (int i = 0; i < warmup; ++i) v.iteration();
  std::vector<std::vector<double>> samples(variants.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < variants.size(); ++k) {
      // Alternate the order each round so neither variant always runs right after the other.
      size_t v = (r % 2 == 0) ? k : variants.size() - 1 - k;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) variants[v].iteration();
      std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      samples[v].push_back(spent.count() / iterations);
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    size_t n = s.size();
    medians.push_back(n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2);
  }
  return medians;
}

}  // namespace dist::bench
