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

#include "distribute/mirrored_extended.h"

namespace dist {

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

// Packs run from the last parameter to the first: backward produces gradients roughly in
// that order, so with overlap (MultiWorkerMirroredStrategy) the first pack is complete first.
// A pack holds one dtype only (it travels as one flat buffer).
std::vector<std::vector<size_t>> make_packs(const std::vector<at::Tensor>& params, int64_t bytes) {
  std::vector<std::vector<size_t>> packs;
  int64_t filled = 0;
  for (size_t j = params.size(); j-- > 0;) {
    const int64_t size = params[j].numel() * static_cast<int64_t>(params[j].element_size());
    const bool new_dtype =
        !packs.empty() && params[packs.back().front()].scalar_type() != params[j].scalar_type();
    if (packs.empty() || new_dtype || (filled > 0 && filled + size > bytes)) {
      packs.emplace_back();
      filled = 0;
    }
    packs.back().push_back(j);
    filled += size;
  }
  return packs;
}

namespace {

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
