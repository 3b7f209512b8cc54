// Device names as users write them: "cpu:0", "CPU:1", "/device:CPU:0", "gpu:0", "cuda:1".
//
// On a machine without GPUs a replica is a logical CPU device: "cpu:0" and "cpu:1" are two
// replicas that share the host's memory and each get a share of the cores.
#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace dist {

enum class DeviceKind { kCpu, kGpu };

struct DeviceName {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  // Canonical spelling: "cpu:0" or "gpu:1".
  std::string to_string() const;
  // The LibTorch device tensors of this replica live on (CPU for every logical CPU device).
  c10::Device torch_device() const;

  bool operator==(const DeviceName& other) const {
    return kind == other.kind && index == other.index;
  }
};

// Parses a device name; throws InvalidArgument naming the text and the accepted forms.
DeviceName parse_device_name(const std::string& text);

// "cpu:0" .. "cpu:{count-1}".
std::vector<DeviceName> logical_cpu_devices(int count);

}  // namespace dist
