// Helpers of the collective layer's tests: run N members as threads, integer data with an
// exact expected result.
#pragma once

#include <ATen/ATen.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace dist::collective::testing {

// Runs fn(rank) on `n` threads and rethrows the first exception (in rank order).
inline void run_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Member `rank`'s tensor `t` of `elements` int64 values: (rank + 1) * (i + 1) + t.
inline at::Tensor member_tensor(int rank, int t, int64_t elements) {
  return at::arange(elements, at::kLong).add(1).mul(rank + 1).add(t);
}

// The element-wise sum of member_tensor over `size` members: (i + 1) * size(size+1)/2 + size*t.
inline at::Tensor expected_sum(int size, int t, int64_t elements) {
  return at::arange(elements, at::kLong).add(1).mul(size * (size + 1) / 2).add(size * t);
}

}  // namespace dist::collective::testing
