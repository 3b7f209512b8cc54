// The step functions and per-worker datasets a binary registered, by name and by number: the
// same on every task, since every task runs the same binary and registers in the same order.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dist/distribute/cluster_coordinator.h"

namespace dist::detail {

// Fills in a ScheduledCall (its members are private to users).
struct ScheduledCallAccess {
  static void set(ScheduledCall& call, std::function<data::Element()> next,
                  std::vector<at::Tensor> arguments, int worker_index) {
    call.next_ = std::move(next);
    call.arguments_ = std::move(arguments);
    call.worker_index_ = worker_index;
  }
};

struct StepRegistry {
  // A step's results as (key, tensor); the key is empty for a function returning one tensor.
  using Results = std::vector<std::pair<std::string, at::Tensor>>;
  using Function = std::function<Results(ScheduledCall&)>;
  using DatasetFunction = std::function<data::Dataset(const InputContext&)>;

  std::mutex mutex;
  std::map<std::string, Function> functions;
  std::vector<DatasetFunction> datasets;
};

}  // namespace dist::detail
