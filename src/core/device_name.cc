#include "dist/core/device_name.h"

#include <algorithm>
#include <cctype>

#include "dist/core/error.h"

namespace dist {

std::string DeviceName::to_string() const {
  return std::string(kind == DeviceKind::kCpu ? "cpu:" : "gpu:") + std::to_string(index);
}

c10::Device DeviceName::torch_device() const {
  if (kind == DeviceKind::kCpu) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

DeviceName parse_device_name(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string prefix = "/device:";
  if (lower.rfind(prefix, 0) == 0) lower = lower.substr(prefix.size());

  DeviceName device;
  std::string kind = lower;
  std::string index;
  if (auto colon = lower.find(':'); colon != std::string::npos) {
    kind = lower.substr(0, colon);
    index = lower.substr(colon + 1);
  }
  if (kind == "cpu") {
    device.kind = DeviceKind::kCpu;
  } else if (kind == "gpu" || kind == "cuda") {
    device.kind = DeviceKind::kGpu;
  } else {
    throw InvalidArgument("bad device name '" + text +
                          "': use cpu:N or gpu:N (also accepted: /device:CPU:N, cuda:N)");
  }
  if (!index.empty()) {
    bool digits = index.size() <= 6 && std::all_of(index.begin(), index.end(),
                                                   [](unsigned char c) { return std::isdigit(c); });
    DIST_CHECK_ARG(digits, "bad device index in '", text, "': expected a number such as cpu:0");
    device.index = std::stoi(index);
  }
  return device;
}

std::vector<DeviceName> logical_cpu_devices(int count) {
  DIST_CHECK_ARG(count >= 1, "need at least one device, got ", count);
  std::vector<DeviceName> devices;
  for (int i = 0; i < count; ++i) devices.push_back({DeviceKind::kCpu, i});
  return devices;
}

}  // namespace dist
