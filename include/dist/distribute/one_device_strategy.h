// OneDeviceStrategy: every variable and step on one device; a single replica.
//
// Useful to test a distributed training loop before spreading it out: the same code then runs
// under MirroredStrategy or MultiWorkerMirroredStrategy by changing only the strategy object.
#pragma once

#include <string>

#include "dist/distribute/strategy.h"

namespace dist {

class OneDeviceStrategy : public Strategy {
 public:
  // device: "cpu:0" (default) or another CPU device name (device_name.h). This build runs on
  // CPUs only: a GPU device is an InvalidArgument.
  explicit OneDeviceStrategy(const std::string& device = "cpu:0");
};

}  // namespace dist
