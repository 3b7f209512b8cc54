// A communication hook's state gathered from every worker, for checkpoints (checkpoint.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/distribute/communication_hook.h"

namespace dist {
class Strategy;
namespace detail {

// Every worker's hook.state(), in worker order: a collective over `strategy`'s workers (one
// worker: its own state alone). InvalidArgument when the workers' states differ in their names,
// shapes or dtypes (they hold the same model, so they never should).
std::vector<std::map<std::string, at::Tensor>> gather_hook_state(const CommunicationHook& hook,
                                                                 const Strategy& strategy);

}  // namespace detail
}  // namespace dist
