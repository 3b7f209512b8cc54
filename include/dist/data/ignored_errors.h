// IgnoredErrors: what Dataset::ignore_errors skipped, for a job's summary.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace dist::data {

// Shared by the pipeline's ignore_errors stages and whoever reports on them; thread-safe.
class IgnoredErrors {
 public:
  void record(const std::string& message) {
    count_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.empty()) first_ = message;
  }
  // How many elements were skipped so far.
  int64_t count() const { return count_.load(); }
  // The first skipped element's error ("" if none), to say what kind of damage it was.
  std::string first_message() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

 private:
  std::atomic<int64_t> count_{0};
  mutable std::mutex mu_;
  std::string first_;
};

}  // namespace dist::data
