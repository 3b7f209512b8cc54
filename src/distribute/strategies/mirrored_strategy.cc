// MirroredStrategy and CentralStorageStrategy: replica threads in one process (the step is
// described in mirrored_extended.cc).
#include "dist/distribute/mirrored_strategy.h"

#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <thread>

#include "distribute/strategies/mirrored_extended.h"

namespace dist {

std::vector<DeviceName> resolve_devices(const MirroredOptions& options) {
  if (options.devices.empty()) return logical_cpu_devices(available_cores());
  std::vector<DeviceName> devices;
  for (const auto& text : options.devices) {
    DeviceName device = parse_device_name(text);
    DIST_CHECK_ARG(device.kind == DeviceKind::kCpu, "device ", device.to_string(),
                   " is a GPU; this build of distribute runs on CPUs only: use cpu:N devices");
    for (const auto& seen : devices)
      DIST_CHECK_ARG(!(seen == device), "device ", device.to_string(),
                     " is listed twice; each replica needs its own device");
    devices.push_back(device);
  }
  return devices;
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
    : Strategy(std::make_shared<MirroredExtended>(std::move(name), std::move(options),
                                                  /*cross_process=*/nullptr,
                                                  /*overlap_with_backward=*/false)) {}

CentralStorageStrategy::CentralStorageStrategy()
    : CentralStorageStrategy(with_devices({}, CrossDeviceOps::kReductionToOneDevice)) {}
CentralStorageStrategy::CentralStorageStrategy(std::vector<std::string> devices)
    : CentralStorageStrategy(
          with_devices(std::move(devices), CrossDeviceOps::kReductionToOneDevice)) {}
CentralStorageStrategy::CentralStorageStrategy(MirroredOptions options)
    : MirroredStrategy("central_storage", std::move(options)) {}

}  // namespace dist
