#include "train/hook_state.h"

#include <ATen/ATen.h>

#include "dist/core/error.h"
#include "dist/distribute/strategy.h"
#include "dist/train/checkpoint.h"

namespace dist {
namespace {

// FNV-1a over the names, shapes and dtypes: equal on every worker that holds the same state.
int64_t layout_hash(const std::map<std::string, at::Tensor>& state) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  };
  for (const auto& [name, t] : state)
    mix(detail::concat(name, ' ', t.sizes(), ' ', t.scalar_type(), ';'));
  return static_cast<int64_t>(hash);
}

// Every worker's hook.state(), in worker order: a collective over `strategy`'s workers (one
// worker: its own state alone). InvalidArgument when the workers' states differ in their names,
// shapes or dtypes (they hold the same model, so they never should).
std::vector<std::map<std::string, at::Tensor>> gather_hook_state(const CommunicationHook& hook,
                                                                 const Strategy& strategy) {
  const std::map<std::string, at::Tensor> local = hook.state();
  const int workers = strategy.num_workers();
  if (workers == 1) return {local};
  const StrategyExtended& extended = strategy.extended();
  const at::Tensor hashes =
      extended.all_gather_across_workers(at::tensor({layout_hash(local)}, at::kLong));
  for (int w = 1; w < workers; ++w)
    DIST_CHECK_ARG(hashes[w].item<int64_t>() == hashes[0].item<int64_t>(),
                   "the communication hook '", hook.name(), "' holds a different state on ",
                   strategy.extended().worker_name(w), " than on ",
                   strategy.extended().worker_name(0),
                   " (names, shapes or dtypes): do all workers train the same models?");
  std::vector<std::map<std::string, at::Tensor>> all(static_cast<size_t>(workers));
  for (const auto& [name, t] : local) {
    const at::Tensor rows =
        extended.all_gather_across_workers(t.contiguous().reshape({1, t.numel()}));
    for (int w = 0; w < workers; ++w)
      all[static_cast<size_t>(w)][name] = rows[w].reshape(t.sizes());
  }
  return all;
}

}  // namespace

Checkpoint& Checkpoint::add(const std::string& name, std::shared_ptr<CommunicationHook> hook,
                            const Strategy& strategy) {
  DIST_CHECK_ARG(hook != nullptr, "Checkpoint: communication hook '", name, "' is null");
  auto job = std::make_shared<HookJob>();
  job->workers = [&strategy] { return strategy.num_workers(); };
  job->worker_index = [&strategy] { return strategy.extended().worker_index(); };
  job->gather = [hook = hook.get(), &strategy] { return gather_hook_state(*hook, strategy); };
  return add_hook(name, std::move(hook), std::move(job));
}

}  // namespace dist
