// MirroredStrategy and CentralStorageStrategy: replica threads in one process.
//
// A step: run() hands each replica thread its share of the global batch with a
// ReplicaContext. The user's step calls backward() (each replica's copy has its own leaf
// parameters, so gradients land in per-replica .grad tensors) and then apply_gradients(),
// a collective: the gradients are reduced in packs into replica 0's .grad tensors, the last
// replica to finish runs one optimizer step on replica 0's parameters (whose storage every
// copy shares) and averages the buffers, and only then is any replica released. So every
// copy holds the same values before the next forward.
#include "dist/distribute/mirrored_strategy.h"

#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <thread>

#include "collective/local_replica_group.h"
#include "distribute/replica_threads.h"

namespace dist {
namespace {

std::vector<DeviceName> resolve_devices(const MirroredOptions& options) {
  if (options.devices.empty()) return logical_cpu_devices(available_cores());
  std::vector<DeviceName> devices;
  for (const auto& text : options.devices) {
    DeviceName device = parse_device_name(text);
    DIST_CHECK_ARG(device.kind == DeviceKind::kCpu, "device ", device.to_string(),
                   " is a GPU; this build has no GPU support (build with DIST_WITH_CUDA on a "
                   "machine with CUDA), use cpu:N devices");
    for (const auto& seen : devices)
      DIST_CHECK_ARG(!(seen == device), "device ", device.to_string(),
                     " is listed twice; each replica needs its own device");
    devices.push_back(device);
  }
  return devices;
}

std::string describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// Splits parameters into packs of about `bytes` bytes (at least one tensor each), in order.
std::vector<std::vector<size_t>> make_packs(const std::vector<at::Tensor>& params, int64_t bytes) {
  std::vector<std::vector<size_t>> packs;
  int64_t filled = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t size = params[i].numel() * static_cast<int64_t>(params[i].element_size());
    if (packs.empty() || (filled > 0 && filled + size > bytes)) {
      packs.emplace_back();
      filled = 0;
    }
    packs.back().push_back(i);
    filled += size;
  }
  return packs;
}

class MirroredExtended : public StrategyExtended,
                         public std::enable_shared_from_this<MirroredExtended> {
 public:
  MirroredExtended(std::string name, MirroredOptions options)
      : name_(std::move(name)), options_(std::move(options)), devices_(resolve_devices(options_)) {
    DIST_CHECK_ARG(options_.bytes_per_pack >= 1, "bytes_per_pack must be positive, got ",
                   options_.bytes_per_pack);
    DIST_CHECK_ARG(options_.collective_timeout.count() > 0,
                   "collective_timeout must be positive, got ", options_.collective_timeout.count(),
                   " ms");
    DIST_CHECK_ARG(options_.threads_per_replica >= 0, "threads_per_replica must be at least 0");
    const int replicas = static_cast<int>(devices_.size());
    const int threads = options_.threads_per_replica > 0
                            ? options_.threads_per_replica
                            : std::max(1, available_cores() / replicas);
    group_ = std::make_unique<collective::LocalReplicaGroup>(replicas, options_.cross_device_ops,
                                                             options_.collective_timeout);
    threads_ = std::make_unique<ReplicaThreads>(replicas, threads);
  }

  std::string name() const override { return name_; }
  int num_replicas_in_sync() const override { return static_cast<int>(devices_.size()); }
  const std::vector<DeviceName>& local_devices() const override { return devices_; }

  void run_replicas(const std::function<void(int)>& body, int64_t global_batch_size) override {
    DIST_CHECK_ARG(get_replica_context() == nullptr,
                   "strategy.run() was called inside a step function; call it from "
                   "cross-replica code (outside run())");
    std::lock_guard<std::mutex> one_run_at_a_time(run_mu_);
    group_->reset();
    auto errors = threads_->run(
        [&](int replica) {
          ReplicaContext context(group_.get(), replica, global_batch_size);
          ReplicaContextScope scope(&context);
          body(replica);
        },
        [&](int replica, std::exception_ptr error) {
          group_->abort(detail::concat("replica ", replica, " (", devices_[replica].to_string(),
                                       ") failed: ", describe_error(error)));
        });
    // Rethrow the root cause: the first replica's own error, not the CollectiveErrors the
    // others got because it stopped taking part.
    std::exception_ptr first_collective;
    for (const auto& error : errors) {
      if (!error) continue;
      try {
        std::rethrow_exception(error);
      } catch (const CollectiveError&) {
        if (!first_collective) first_collective = error;
      } catch (...) {
        throw;
      }
    }
    if (first_collective) std::rethrow_exception(first_collective);
  }

  std::shared_ptr<detail::MirroredVariables> mirror_module(
      std::shared_ptr<torch::nn::Module> primary) override {
    DIST_CHECK_ARG(primary != nullptr, "mirror: the model is empty (a null module)");
    auto variables = std::make_shared<detail::MirroredVariables>();
    variables->strategy = shared_from_this();
    variables->replicas.push_back(primary);
    const auto primary_params = primary->parameters();
    for (size_t r = 1; r < devices_.size(); ++r) {
      std::shared_ptr<torch::nn::Module> copy;
      try {
        copy = primary->clone();
      } catch (const c10::Error& e) {
        throw InvalidArgument(detail::concat(
            "mirror: cannot copy module ", primary->name(), " for replica ", r,
            ": derive it from torch::nn::Cloneable<", primary->name(),
            "> (or build it from torch::nn::Sequential) so each replica can get a copy"));
      }
      // Share the parameters' storage with the primary; each copy keeps its own leaf
      // variables (so its own gradients) and its own buffers. Match by position: a clone
      // may name its submodules differently (Sequential's clone numbers them).
      auto copy_params = copy->parameters();
      DIST_INTERNAL_ASSERT(copy_params.size() == primary_params.size(), "clone of ",
                           primary->name(), " has a different parameter count");
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < copy_params.size(); ++i) copy_params[i].set_data(primary_params[i]);
      variables->replicas.push_back(std::move(copy));
    }
    return variables;
  }

  void apply_gradients(detail::MirroredVariables& variables,
                       torch::optim::Optimizer& optimizer) override {
    DIST_CHECK_ARG(variables.replicas.size() == devices_.size(), "apply_gradients: the model has ",
                   variables.replicas.size(), " copies but this strategy runs ", devices_.size(),
                   " replicas; make the model and optimizer with the strategy that runs them");
    ReplicaContext* context = get_replica_context();
    if (context == nullptr) return apply_in_cross_replica_context(variables, optimizer);
    DIST_CHECK_ARG(context->group() == group_.get(),
                   "apply_gradients was called inside run() of a different strategy than the "
                   "one that made this optimizer");
    const int replica = context->local_replica_id();
    auto params = variables.replicas[static_cast<size_t>(replica)]->parameters();
    std::vector<at::Tensor> grads;
    for (auto& p : params) {
      // An empty replica or an unused parameter has no gradient; it still takes part.
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    auto packs = make_packs(grads, options_.bytes_per_pack);
    for (size_t k = 0; k < packs.size(); ++k) {
      std::vector<at::Tensor> pack;
      for (size_t i : packs[k]) pack.push_back(grads[i]);
      const bool last = k + 1 == packs.size();
      group_->all_reduce_into_first(
          replica, ReduceOp::kSum, pack,
          last ? std::function<void()>([&] { update(variables, optimizer); })
               : std::function<void()>());
    }
    if (packs.empty())
      group_->barrier(replica, "apply_gradients", [&] { update(variables, optimizer); });
    for (auto& p : params) p.mutable_grad().reset();
  }

 private:
  // Runs once per step, in one replica thread while the others wait: one optimizer step on
  // the primary's parameters (shared by all copies), then the buffers are averaged.
  void update(detail::MirroredVariables& variables, torch::optim::Optimizer& optimizer) {
    const int own_threads = at::get_num_threads();
    const int all_threads = std::max(own_threads, available_cores());
    if (all_threads != own_threads) at::set_num_threads(all_threads);  // the others are idle
    try {
      optimizer.step();
      average_buffers(variables);
    } catch (...) {
      if (all_threads != own_threads) at::set_num_threads(own_threads);
      throw;
    }
    if (all_threads != own_threads) at::set_num_threads(own_threads);
  }

  // Buffers (BatchNorm statistics) are per replica; keep them in sync as their mean, as
  // tf.distribute does for ON_READ variables aggregated with MEAN.
  static void average_buffers(detail::MirroredVariables& variables) {
    std::vector<std::vector<at::Tensor>> buffers;
    for (const auto& replica : variables.replicas) buffers.push_back(replica->buffers());
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < buffers[0].size(); ++b) {
      if (!at::isFloatingType(buffers[0][b].scalar_type())) continue;
      at::Tensor mean = buffers[0][b].clone();
      for (size_t r = 1; r < buffers.size(); ++r) mean.add_(buffers[r][b]);
      mean.div_(static_cast<double>(buffers.size()));
      for (auto& replica : buffers) replica[b].copy_(mean);
    }
  }

  // apply_gradients called after run() in cross-replica code: the gradients of every copy are
  // summed into the primary's here, in replica order.
  void apply_in_cross_replica_context(detail::MirroredVariables& variables,
                                      torch::optim::Optimizer& optimizer) {
    torch::NoGradGuard no_grad;
    auto primary = variables.replicas[0]->parameters();
    for (size_t r = 1; r < variables.replicas.size(); ++r) {
      auto params = variables.replicas[r]->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (!params[i].grad().defined()) continue;
        if (!primary[i].grad().defined()) primary[i].mutable_grad() = at::zeros_like(primary[i]);
        primary[i].mutable_grad().add_(params[i].grad());
      }
    }
    optimizer.step();
    average_buffers(variables);
    for (auto& replica : variables.replicas)
      for (auto& p : replica->parameters()) p.mutable_grad().reset();
  }

  std::string name_;
  MirroredOptions options_;
  std::vector<DeviceName> devices_;
  std::unique_ptr<collective::LocalReplicaGroup> group_;
  std::unique_ptr<ReplicaThreads> threads_;
  std::mutex run_mu_;
};

MirroredOptions with_devices(std::vector<std::string> devices, CrossDeviceOps ops) {
  MirroredOptions options;
  options.devices = std::move(devices);
  options.cross_device_ops = ops;
  return options;
}

}  // namespace

int available_cores() { return std::max(1u, std::thread::hardware_concurrency()); }

MirroredStrategy::MirroredStrategy() : MirroredStrategy(MirroredOptions{}) {}
MirroredStrategy::MirroredStrategy(std::vector<std::string> devices)
    : MirroredStrategy(with_devices(std::move(devices), CrossDeviceOps::kParallelAllReduce)) {}
MirroredStrategy::MirroredStrategy(MirroredOptions options)
    : MirroredStrategy("mirrored", std::move(options)) {}
MirroredStrategy::MirroredStrategy(std::string name, MirroredOptions options)
    : Strategy(std::make_shared<MirroredExtended>(std::move(name), std::move(options))) {}

CentralStorageStrategy::CentralStorageStrategy()
    : CentralStorageStrategy(with_devices({}, CrossDeviceOps::kReductionToOneDevice)) {}
CentralStorageStrategy::CentralStorageStrategy(std::vector<std::string> devices)
    : CentralStorageStrategy(
          with_devices(std::move(devices), CrossDeviceOps::kReductionToOneDevice)) {}
CentralStorageStrategy::CentralStorageStrategy(MirroredOptions options)
    : MirroredStrategy("central_storage", std::move(options)) {}

}  // namespace dist
