#include "collective/local/replica_barrier.h"

#include "dist/core/error.h"

namespace dist::collective {

ReplicaBarrier::ReplicaBarrier(int parties, std::chrono::milliseconds timeout, std::string place)
    : parties_(parties),
      timeout_(timeout),
      place_(std::move(place)),
      arrived_(static_cast<size_t>(parties), false) {
  DIST_INTERNAL_ASSERT(parties >= 1);
}

void ReplicaBarrier::throw_aborted() const { throw CollectiveError(*abort_reason_); }

void ReplicaBarrier::arrive_and_wait(int party, const char* what,
                                     const std::function<void()>& on_complete) {
  std::unique_lock<std::mutex> lock(mu_);
  if (abort_reason_) throw_aborted();
  DIST_INTERNAL_ASSERT(party >= 0 && party < parties_ && !arrived_[static_cast<size_t>(party)],
                       "replica ", party, " arrived twice at ", what);
  arrived_[static_cast<size_t>(party)] = true;
  if (++arrived_count_ == parties_) {
    if (on_complete) {
      try {
        on_complete();
      } catch (const std::exception& e) {
        abort_reason_ = e.what();
        released_.notify_all();
        throw CollectiveError(*abort_reason_);
      }
    }
    std::fill(arrived_.begin(), arrived_.end(), false);
    arrived_count_ = 0;
    ++generation_;
    released_.notify_all();
    return;
  }
  const uint64_t my_generation = generation_;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (generation_ == my_generation && !abort_reason_) {
    if (released_.wait_until(lock, deadline) == std::cv_status::timeout &&
        generation_ == my_generation && !abort_reason_) {
      std::string missing;
      for (int p = 0; p < parties_; ++p)
        if (!arrived_[static_cast<size_t>(p)])
          missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      abort_reason_ = detail::concat(
          "collective timeout: replica(s) ", missing, place_, " did not reach ", what, " within ",
          timeout_.count() / 1000.0, " s while replica ", party, place_,
          " waited; every replica must call the same collectives in the same order (a replica "
          "that skips apply_gradients or an all_reduce, or is stuck, causes this)");
      released_.notify_all();
    }
  }
  if (generation_ == my_generation) throw_aborted();
}

void ReplicaBarrier::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!abort_reason_) abort_reason_ = reason;
  released_.notify_all();
}

void ReplicaBarrier::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  abort_reason_.reset();
  std::fill(arrived_.begin(), arrived_.end(), false);
  arrived_count_ = 0;
  ++generation_;
}

bool ReplicaBarrier::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_.has_value();
}

}  // namespace dist::collective
