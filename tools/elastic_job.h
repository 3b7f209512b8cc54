// dist-train's elastic job (--min-workers, docs/elastic.md): the custom loop run generation
// after generation. When a worker is lost, the survivors agree on who goes on (through the
// job's rendezvous store), build a new strategy, model and optimizer among themselves, restore
// the last training state each of them committed to memory, and go on with the same global
// batch, so the job ends with the weights of a run that never changed size.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "dist/core/memory_env.h"
#include "dist/train/checkpoint.h"
#include "train_job.h"

namespace dist::tools {

// The training states this worker committed, in memory: the last two, so that whichever step
// the survivors agree on (one of them may have completed one step more than another before the
// loss) every one of them still has it.
class CommittedStates {
 public:
  void commit(int64_t step, const Checkpoint& checkpoint);
  // The newest committed step; -1 if none.
  int64_t latest() const { return steps_.empty() ? -1 : steps_.back(); }
  bool has(int64_t step) const;
  // Reads the state committed at `step` (has(step) must hold) into `checkpoint`.
  void restore(int64_t step, Checkpoint& checkpoint);
  // The state of `step` as bytes, to send to a worker that joins; and taking one received.
  std::string bytes_of(int64_t step) const;
  void adopt(int64_t step, const std::string& bytes);
  int64_t bytes() const { return env_.bytes(); }

 private:
  static std::string path_of(int64_t step);
  mutable MemoryEnv env_;
  std::deque<int64_t> steps_;
};

// What the custom loop of one generation needs from the elastic job.
struct ElasticRun {
  CommittedStates committed;
  int64_t commit_every = 1;
  // Set from a resize until the next step completes: then the time between is printed.
  std::optional<std::chrono::steady_clock::time_point> recovering_since;
  std::string recovering_from;  // "this worker saw the loss", ...
  std::string resize;           // "sizes 3 -> 2 (lost worker:1)", said with the recovery time
  // Whether a worker waits to join: the generation's chief asks at each commit, and the group
  // then regroups at that step boundary.
  std::function<bool()> join_requested;
};

// The elastic job (options.min_workers > 0); the chief writes progress to `chief_out`. Throws
// CollectiveError naming the lost workers and the last committed step once fewer than
// --min-workers remain.
TrainResult run_elastic_training(const TrainOptions& options, std::ostream& chief_out);

}  // namespace dist::tools
