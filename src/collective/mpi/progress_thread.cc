#include "collective/mpi/progress_thread.h"

namespace dist::collective {

ProgressThread::ProgressThread() : thread_([this] { loop(); }) {}

void ProgressThread::watch(const std::shared_ptr<Progressing>& operation) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    in_flight_.push_back(operation);
  }
  wake_.notify_one();
}

void ProgressThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    in_flight_.clear();
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void ProgressThread::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (in_flight_.empty()) {
      wake_.wait(lock, [this] { return stopping_ || !in_flight_.empty(); });
      continue;
    }
    std::vector<std::weak_ptr<Progressing>> works = in_flight_;
    lock.unlock();
    std::vector<bool> finished(works.size(), true);
    for (size_t i = 0; i < works.size(); ++i) {
      std::shared_ptr<Progressing> work = works[i].lock();
      finished[i] = !work || work->advance();
    }
    lock.lock();
    // Drop what finished; works watched meanwhile were appended after the copy.
    size_t kept = 0;
    for (size_t i = 0; i < in_flight_.size(); ++i)
      if (i >= works.size() || !finished[i]) in_flight_[kept++] = in_flight_[i];
    in_flight_.resize(kept);
    wake_.wait_for(lock, kInterval, [this] { return stopping_; });
  }
}

}  // namespace dist::collective
