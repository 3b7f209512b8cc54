// What a checkpoint's communication hook object asks of the strategy the hook serves
// (checkpoint.h). Apart from the checkpoint's own files (checkpoint*.cc), so that its readers
// (the fuzz targets) build without the strategies: Checkpoint::add(name, hook, strategy) is
// defined in hook_state.cc and hands the checkpoint these functions.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/train/checkpoint.h"

namespace dist {

struct Checkpoint::HookJob {
  std::function<int()> workers;       // how many workers the strategy has
  std::function<int()> worker_index;  // this one's
  // Every worker's hook.state(), in worker order: a collective over the strategy's workers.
  std::function<std::vector<std::map<std::string, at::Tensor>>()> gather;
};

}  // namespace dist
