// Elastic dist-train jobs for the tests: a small job's flags, its workers started as processes
// on loopback (some under killed_train, tests/tools/killed_train_main.cc), and its weights
// against one device's on the same global batches.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/distribute/local_cluster.h"
#include "equivalence_data.h"
#include "multi_worker/process_group.h"
#include "test_util.h"
#include "tools/train_runs.h"
#include "tools/weight_files.h"

namespace dist::testing {

// job_args (global batch 64 of 1280 examples, seed 5, SGD unless `optimizer`) under `strategy`.
// Evaluated on 1000 test images (the epochs are 20 steps; the whole test set would take more
// time than the training): the test set does not touch the weights.
inline std::vector<std::string> small_job(const std::string& strategy, const std::string& weights,
                                          int max_steps, const std::string& optimizer) {
  auto args = job_args(strategy, weights, max_steps);
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--optimizer") args[i + 1] = optimizer;
  return args;
}

// An elastic multi-worker job going on with at least `min_workers`.
inline std::vector<std::string> elastic_args(const std::string& weights, int max_steps,
                                             int min_workers,
                                             const std::string& optimizer = "sgd") {
  auto args = small_job("multi_worker", weights, max_steps, optimizer);
  args.insert(args.end(), {"--min-workers", std::to_string(min_workers)});
  return args;
}

inline std::vector<std::string> with(std::vector<std::string> front,
                                     const std::vector<std::string>& back) {
  front.insert(front.end(), back.begin(), back.end());
  return front;
}

// Starts one worker per port with `args`: worker i under killed_train with `faults[i]` when it
// has any (its faults come first), else dist-train.
inline void start_workers(WorkerProcesses& processes, const std::vector<int>& ports,
                          const std::vector<std::string>& args,
                          const std::vector<std::vector<std::string>>& faults) {
  for (size_t i = 0; i < ports.size(); ++i) {
    const bool faulty = i < faults.size() && !faults[i].empty();
    processes.start(faulty ? KILLED_TRAIN_BINARY : DIST_TRAIN_BINARY,
                    faulty ? with(faults[i], args) : args,
                    {"TF_CONFIG=" + local_tf_config(ports, static_cast<int>(i))});
  }
}

inline double difference_from_one_device(const std::string& weights, int max_steps,
                                         const std::string& optimizer = "sgd") {
  const std::string one = reference_weights(small_job("one_device", "", max_steps, optimizer));
  return max_relative_difference(weights_in(weights), weights_in(one));
}

}  // namespace dist::testing
