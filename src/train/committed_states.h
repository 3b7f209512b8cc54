// The training states one worker of an elastic job committed, in memory (dist/train/elastic.h).
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "dist/core/memory_env.h"
#include "dist/train/checkpoint.h"

namespace dist::detail {

// The training states this worker committed, in memory. Commits are numbered 1, 2, ... in the
// order every worker makes them (a commit is a collective), across generations: the number, not
// the step, names a state, because a step can be committed twice (mid-epoch, then at the epoch's
// end with the next epoch's position). The last two are kept: a loss can end a commit on some
// survivors and not on others, so their newest numbers differ by at most one, and the older of
// them is then held by every survivor.
class CommittedStates {
 public:
  // Commits `checkpoint` (its state.step says the step) as the next number.
  void commit(const Checkpoint& checkpoint);
  // The newest commit's number; -1 if none.
  int64_t latest() const { return commits_.empty() ? -1 : commits_.back().number; }
  // The newest commit's step; -1 if none.
  int64_t latest_step() const { return commits_.empty() ? -1 : commits_.back().step; }
  bool has(int64_t number) const;
  // Reads commit `number` (has(number) must hold) into `checkpoint`, and forgets the newer ones:
  // the job goes on from it.
  void restore(int64_t number, Checkpoint& checkpoint);
  // Commit `number` as bytes, to send to a worker that joins; and taking one received.
  std::string bytes_of(int64_t number) const;
  void adopt(int64_t number, const std::string& bytes);

 private:
  struct Commit {
    int64_t number;
    int64_t step;
  };
  static std::string path_of(int64_t number);
  void forget_front();
  mutable MemoryEnv env_;
  std::deque<Commit> commits_;
};

}  // namespace dist::detail
